"""JSON and msgpack codecs for requests and events (what a non-Python host speaks)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from run_supervisor.protocol._events import Event
from run_supervisor.protocol._requests import Request

__all__ = ["ProtocolDecodeError", "decode_event", "decode_request", "encode"]

Format = Literal["json", "msgpack"]

_REQUEST_DECODERS: dict[str, Any] = {
    "json": msgspec.json.Decoder(Request),
    "msgpack": msgspec.msgpack.Decoder(Request),
}
_EVENT_DECODERS: dict[str, Any] = {
    "json": msgspec.json.Decoder(Event),
    "msgpack": msgspec.msgpack.Decoder(Event),
}
_ENCODERS: dict[str, Any] = {"json": msgspec.json.Encoder(), "msgpack": msgspec.msgpack.Encoder()}


class ProtocolDecodeError(ValueError):
    """Bytes that are not a valid request or event; the message says what and where."""


def _decoder(table: dict[str, Any], fmt: str) -> Any:
    try:
        return table[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: use 'json' or 'msgpack'") from None


def encode(message: Any, fmt: Format = "json") -> bytes:
    """Encode a request, event or answer."""
    encoder: Any = _decoder(_ENCODERS, fmt)
    data: bytes = encoder.encode(message)
    return data


def _decode(table: dict[str, Any], data: bytes | str, fmt: str, what: str) -> Any:
    decoder = _decoder(table, fmt)
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
    request: Request = _decode(_REQUEST_DECODERS, data, fmt, "request")
    return request


def decode_event(data: bytes | str, fmt: Format = "json") -> Event:
    """Decode one event; raise ``ProtocolDecodeError`` on anything else. Events of this version: a
    run's events name its ``session``, so one written by an older version without it does not
    decode."""
    event: Event = _decode(_EVENT_DECODERS, data, fmt, "event")
    return event
