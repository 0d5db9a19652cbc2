"""Where the URL and the token come from: the arguments, else ``GPUQ_URL`` and
``GPUQ_TOKEN``, else the config file ``~/.config/gpuq/config.toml`` (under
``$XDG_CONFIG_HOME`` when it is set), which ``gpuq login`` writes::

    url = "https://sched.example.com"
    token = "gsu_..."
    username = "alice"

The file holds a credential: it is written with mode 0600, in a directory of mode 0700,
through a temporary file renamed over it (a crash never leaves half a token). It is read
with ``tomllib``; the standard library has no TOML writer, and three string keys need
none: :func:`toml_string` quotes them.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

URL_ENV = "GPUQ_URL"
TOKEN_ENV = "GPUQ_TOKEN"


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuq" / "config.toml"


@dataclass(frozen=True, slots=True)
class Settings:
    url: str
    token: str
    username: str = ""


def read_file(path: Path | None = None) -> dict[str, str]:
    """The config file's string keys ({} when there is none)."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error}") from error
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from error
    return {k: v for k, v in data.items() if isinstance(v, str)}


def resolve(url: str | None = None, token: str | None = None) -> Settings:
    """The URL and token to use: each argument given wins, then the environment, then the
    config file. Raises :class:`ConfigError` naming what to set when one is missing."""
    stored: dict[str, str] | None = None

    def pick(given: str | None, env: str, key: str) -> str:
        nonlocal stored
        if given:
            return given
        if os.environ.get(env):
            return os.environ[env]
        if stored is None:
            stored = read_file()
        return stored.get(key, "")

    settings = Settings(url=pick(url, URL_ENV, "url").strip(),
                        token=pick(token, TOKEN_ENV, "token").strip(),
                        username=(stored or {}).get("username", ""))
    if not settings.url:
        raise ConfigError(f"no scheduler URL: set {URL_ENV}, or run `gpuq login --url URL` "
                          f"(it writes {config_path()})")
    if not settings.token:
        raise ConfigError(f"no API token: run `gpuq login`, or set {TOKEN_ENV}")
    check_token(settings.token)
    return settings


def check_token(token: str) -> str:
    """``token`` if it can be a token (printable ASCII, no spaces): one that cannot went
    into an HTTP header and crashed with a UnicodeEncodeError (a researcher's session,
    2026-12-07). Raises :class:`ConfigError`."""
    if not token.isascii() or not token.isprintable() or " " in token:
        raise ConfigError(f"the API token ({TOKEN_ENV}, or the config file) is not a token: "
                          "tokens are printable ASCII without spaces; run `gpuq login`")
    return token


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quotes, backslashes and control characters
    escaped)."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def write_file(values: dict[str, str], path: Path | None = None) -> Path:
    """Write ``values`` (string keys) as the config file, mode 0600; returns its path."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = "# written by `gpuq login`: it holds your API token, keep it private\n" + "".join(
        f"{key} = {toml_string(value)}\n" for key, value in values.items())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # created 0600 from the start: the token is never readable by others, not even briefly
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)  # an existing temp file keeps its mode through O_CREAT
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
