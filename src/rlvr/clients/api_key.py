"""The API key of an OpenAI-compatible endpoint: where it is read from, and how it is kept out
of everything rlvr writes (`redact`: results, reports, the terminal, tool-call arguments, since
every text a server sends passes through the client that redacts it)."""

from __future__ import annotations

import base64
import functools
import os
import re
import urllib.parse
import warnings
from collections.abc import Sequence
from urllib.parse import urlparse

from rlvr.errors import ClientError

REDACTED = "[API key redacted]"
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


def api_key_for(var: str, base_urls: Sequence[str | None]) -> str:
    """The API key in environment variable `var`; "EMPTY" when unset and every URL is on this
    machine (local servers usually need no key); `ClientError` otherwise."""
    key = os.environ.get(var)
    if key:
        return key
    if all(url and urlparse(url).hostname in LOCAL_HOSTS for url in base_urls):
        return "EMPTY"  # local servers (vLLM, transformers serve) usually need no key
    raise ClientError(
        f"no API key: the environment variable {var} is not set; export {var}=... "
        f"or pass -k NAME to read the key from another variable"
    )


MIN_KEY_CHARS = 16
"""Shorter API keys are not redacted: replacing a short value would rewrite ordinary text (a key
`e` turned every `e` of every reply into `REDACTED`)."""
_PROVIDER_KEY = re.compile(r"(sk-|sk-ant-|sk-proj-|gsk_|hf_|xai-|AIza)[A-Za-z0-9_\-]{8,}")
"""A provider's key format (OpenAI, Anthropic, Groq, Hugging Face, xAI, Google): redacted at any length."""


def redactable(secret: str | None) -> bool:
    """Whether `secret` is long enough, or shaped enough like a provider's key, to be redacted
    without rewriting ordinary text.

    >>> redactable("e"), redactable("EMPTY"), redactable("sk-abcdefgh"), redactable("0123456789abcdef")
    (False, False, True, True)
    """
    return bool(secret) and (len(secret or "") >= MIN_KEY_CHARS or _PROVIDER_KEY.fullmatch(secret or "") is not None)


def redact(text: str, secret: str | None) -> str:
    """`text` with every copy of `secret` replaced by `REDACTED`: as it is, URL-encoded, and in
    base64 (standard or URL-safe, at any alignment inside a longer encoded string); a secret
    that is not `redactable` leaves the text as it is.

    >>> redact("Incorrect API key provided: sk-12345678. Not sk-1234567.", "sk-12345678")
    'Incorrect API key provided: [API key redacted]. Not sk-1234567.'
    >>> redact("every e", "e"), redact("Basic " + base64.b64encode(b"u:sk-12345678").decode(), "sk-12345678")
    ('every e', 'Basic dTp[API key redacted]A==')
    """
    pattern = _secret_pattern(secret) if secret else None
    return pattern.sub(REDACTED, text) if pattern is not None else text


@functools.lru_cache(maxsize=8)
def _secret_pattern(secret: str) -> re.Pattern[str] | None:
    """One regex for every form of `secret` that `redact` replaces (None: not redactable)."""
    if not redactable(secret):
        return None
    raw = secret.encode("utf-8")
    forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    for offset in range(3):  # the characters of an encoding that only the secret's bytes decide
        start, end = -(-8 * offset // 6), 8 * (offset + len(raw)) // 6
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(b"\0" * offset + raw)[start:end].decode("ascii"))
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))


def warn_if_unredactable(var: str, secret: str | None) -> None:
    """Warn once that the key in `var` is too short to be redacted (it is then used, not redacted)."""
    if secret and not redactable(secret):
        warnings.warn(
            f"rlvr: the API key in ${var} has {len(secret)} characters: too short to redact without "
            "rewriting replies, so it is not redacted from what the server sends back",
            UserWarning,
            stacklevel=3,
        )
