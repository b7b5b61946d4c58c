"""JSON and msgpack codecs for requests and events (what a non-Python host speaks)."""

from __future__ import annotations

import functools
from typing import Any, Literal

import msgspec

from run_supervisor.protocol._events import Event
from run_supervisor.protocol._requests import Request

__all__ = ["ProtocolDecodeError", "decode_event", "decode_request", "encode"]

Format = Literal["json", "msgpack"]

_ENCODERS: dict[str, Any] = {"json": msgspec.json.Encoder(), "msgpack": msgspec.msgpack.Encoder()}
_MODULES = {"json": msgspec.json, "msgpack": msgspec.msgpack}


class ProtocolDecodeError(ValueError):
    """Bytes that are not a valid request or event; the message says what and where."""


def _format(fmt: str) -> str:
    if not isinstance(fmt, str) or fmt not in _ENCODERS:
        raise ValueError(f"unknown format {fmt!r}: use 'json' or 'msgpack'")
    return fmt


@functools.cache
def _decoder(kind: Any, fmt: str) -> Any:
    """The decoder of ``kind`` (``Request`` or ``Event``) in ``fmt``, built on first use: a decoder of
    the whole union takes msgspec a while to build, and a host that never decodes one never waits."""
    return _MODULES[fmt].Decoder(kind)


def encode(message: Any, fmt: Format = "json") -> bytes:
    """Encode a request, event or answer."""
    encoder: Any = _ENCODERS[_format(fmt)]
    data: bytes = encoder.encode(message)
    return data


def _decode(kind: Any, data: bytes | str, fmt: str, what: str) -> Any:
    decoder = _decoder(kind, _format(fmt))
    if isinstance(data, str):
        if fmt == "msgpack":
            raise ProtocolDecodeError(f"not a valid {what}: msgpack is bytes, not text")
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ProtocolDecodeError(f"not a valid {what}: text that is not UTF-8 ({exc.reason})") from None
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolDecodeError(f"not a valid {what}: {exc}") from None
    except RecursionError:  # a deeply nested document: refused like any other malformed one
        raise ProtocolDecodeError(f"not a valid {what}: it is nested too deeply") from None


def decode_request(data: bytes | str, fmt: Format = "json") -> Request:
    """Decode one request; raise ``ProtocolDecodeError`` on anything else (a field the request does
    not have, by name, and a document nested too deeply included). Strict: a permission reply says
    ``approved`` (the wire hosts still take the deprecated ``approve`` before they decode; this does
    not)."""
    request: Request = _decode(Request, data, fmt, "request")
    return request


def decode_event(data: bytes | str, fmt: Format = "json") -> Event:
    """Decode one event; raise ``ProtocolDecodeError`` on anything else. Events of this version: a
    run's events name its ``session``, so one written by an older version without it does not
    decode."""
    event: Event = _decode(Event, data, fmt, "event")
    return event
