"""``manage.py api_token``: issue an API token for a user (a pipeline) or a node's agent.

    manage.py api_token --user alice --name nightly-sweeps
    manage.py api_token --node pod-a-n01

Prints the key once (only its hash is stored). ``--revoke PREFIX`` revokes tokens by the
prefix shown in lists.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.api.models import ApiToken
from scheduler_app.api.tokens import token_issue, token_revoke
from scheduler_app.models import Node


class Command(BaseCommand):
    help = "Issue (or revoke) an API token for a user or a node agent."

    def add_arguments(self, parser: CommandParser) -> None:
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="username: a token for pipelines acting as them")
        who.add_argument("--node", help="node name: a token for that node's agent")
        who.add_argument("--revoke", metavar="PREFIX", help="revoke live tokens with this "
                         "prefix")
        parser.add_argument("--name", default="", help="what the token is for")

    def handle(self, *args: object, **options: object) -> None:
        if options["revoke"]:
            tokens = ApiToken.objects.filter(prefix=options["revoke"], revoked_at__isnull=True)
            if not tokens:
                raise CommandError(f"no live token with prefix {options['revoke']!r}")
            for token in tokens:
                token_revoke(token=token)
                self.stdout.write(f"revoked {token}")
            return
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"no user {options['user']!r}")
            _token, key = token_issue(user=user, name=str(options["name"]))
        else:
            node = Node.objects.filter(name=options["node"]).first()
            if node is None:
                raise CommandError(f"no node {options['node']!r} (an agent registers it, "
                                   "or POST /api/v1/agent/register/ as an operator)")
            _token, key = token_issue(node=node, name=str(options["name"]) or f"agent {node}")
        self.stdout.write(key)
