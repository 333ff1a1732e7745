"""The one redaction function: every URI or line of text we print, log, render, write or put in argv
passes through `redact` first.

A tracking or backend store URI can carry a password in two places (`user:password@host` and a
`?password=` query parameter), and a setting such as `DATABASE_PASSWORD=...` can be quoted in an error
line. Each of those once reached stdout, a report rendered into an artifact, or a 0644 journal file.
Redaction works on text, not on a parsed URI, so a URI that does not parse (`http://[::1`) or one
embedded in an exception message is redacted too. Nothing here imports torch or mlflow.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://userinfo@host: the userinfo's password is everything after its first ':' up to the last '@'
# before the path (a password with a raw '@' or '/' is still cut, as urlsplit would split it).
_NETLOC = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<netloc>[^/?#\s'\"<>]*)")
# query parameters that hold a secret (libpq's password/sslpassword, drivers' pwd/passwd, tokens)
_SECRET_PARAM = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pwd|sslpassword|token|access_token|secret|api_key|apikey)=)"
    r"(?P<value>[^&#\s'\"<>]*)",
    re.IGNORECASE,
)
# NAME=value for MLFLOW_* and DATABASE_* settings whose name says the value is a secret
_SECRET_SETTING = re.compile(
    r"(?P<key>\b(?:MLFLOW|DATABASE)_[A-Z0-9_]*(?:PASSWORD|PASSWD|TOKEN|SECRET|KEY)[A-Z0-9_]*\s*=\s*['\"]?)"
    r"(?P<value>[^\s'\"]+)"
)


def _netloc(match: re.Match[str]) -> str:
    netloc = match["netloc"]
    if "@" not in netloc:
        return match.group(0)
    userinfo, host = netloc.rsplit("@", 1)
    if ":" not in userinfo:
        return match.group(0)
    return f"{match['scheme']}{userinfo.split(':', 1)[0]}:{MASK}@{host}"


def redact(text: str) -> str:
    """`text` with every password replaced by `***`: in `user:password@` of any URI, in `?password=`
    (and `pwd`, `token`, ...) query parameters, and in `MLFLOW_*`/`DATABASE_*` secret settings.

    Everything else is kept as it was, so a redacted URI still says which store it is."""
    if not text:
        return text
    text = _NETLOC.sub(_netloc, text)
    text = _SECRET_PARAM.sub(lambda m: m["key"] + MASK, text)
    return _SECRET_SETTING.sub(lambda m: m["key"] + MASK, text)


def is_redacted(text: str) -> bool:
    """Whether `redact` would change `text`: a URI that carries a secret."""
    return redact(text) != text
