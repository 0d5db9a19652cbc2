"""The scheduling core: pure Python, no Django, time always passed in as an argument.

A test enforces that nothing under this package imports Django.
"""
