"""Masking what may carry a secret in text that people see: URLs with a password (`user:pass@`) or a
query string (an Azure SAS token, a presigned URL's signature). A leaf module: errors, logs,
summaries, the report and workers' tracebacks all mask with `mask_urls`.
"""

from __future__ import annotations

import logging
import re

MASK = "***"

_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'\"<>`]*)")
_USERINFO = re.compile(r"^(?P<user>[^/?#@:]*):[^/?#@]*@")
_QUERY_VALUE = re.compile(r"=[^&#]*")


def mask_urls(text: str) -> str:
    """`text` with every URL's password and query values masked: `https://u:***@host/p?sv=***&sig=***`.
    A user name alone (`abfs://container@account...`, `s3://conn_id@bucket`) names no secret and stays."""
    if "://" not in text:
        return text
    return _URL.sub(_mask_one, text)


def _mask_one(match: re.Match[str]) -> str:
    rest = _USERINFO.sub(lambda m: f"{m.group('user')}:{MASK}@", match.group("rest"), count=1)
    path, mark, query = rest.partition("?")
    if mark:
        fragment = ""
        if "#" in query:
            query, fragment = query.split("#", 1)
            fragment = "#" + fragment
        query = _QUERY_VALUE.sub("=" + MASK, query) if "=" in query else MASK
        rest = path + mark + query + fragment
    return match.group("scheme") + rest


class URLMaskingFilter(logging.Filter):
    """Masks URLs' credentials in every record of a logger (and what it propagates to its host's handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "://" in message:
            record.msg, record.args = mask_urls(message), None
        return True


URL_MASKING = URLMaskingFilter()
