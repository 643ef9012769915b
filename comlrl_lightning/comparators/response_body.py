"""A response body decoded piece by piece: never more than a bounded amount of it in memory at once.

httpx decodes a compressed body one network chunk at a time, and a chunk of a decompression bomb
(64 KiB of gzip) can become 64 MiB at once, before any size check can look at it; eight requests
in flight make that half a gigabyte. :func:`decoded_pieces` decompresses the raw bytes itself,
asking zlib for at most :data:`PIECE` bytes per call (``max_length``), so the body grows by at most
one piece beyond what the caller decided to keep. The codings are the ones the client asks for
(``Accept-Encoding: gzip, deflate``), also stacked (``Content-Encoding: gzip, gzip``).
"""

from __future__ import annotations

import zlib
from typing import Iterable, Iterator, Optional

ACCEPT_ENCODING = "gzip, deflate"
"""What the client tells a server it may send; anything else in ``Content-Encoding`` is refused."""
PIECE = 1 << 16
"""Most bytes one decompression step produces (and raw bytes read at once)."""


class BodyEncodingError(ValueError):
    """A body in a coding the client did not ask for, or whose bytes do not decode."""


def decoded_pieces(raw: Iterable[bytes], content_encoding: Optional[str]) -> Iterator[bytes]:
    """The decoded body of ``raw`` chunks sent with ``content_encoding``, in pieces of at most
    :data:`PIECE` bytes (an empty piece after a raw chunk that decoded to nothing yet, so the
    caller can check its clock while a slow server drips compressed bytes)."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    pieces: Iterable[bytes] = raw
    for coding in codings:  # applied in the order listed, so decoded in the reverse order
        if coding == "identity":
            continue
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise BodyEncodingError(f"Content-Encoding {coding!r} was not asked for (only {ACCEPT_ENCODING})")
    for coding in reversed([c for c in codings if c != "identity"]):
        pieces = _inflate(pieces, gzip=coding in ("gzip", "x-gzip"))
    return iter(pieces)


def _inflate(pieces: Iterable[bytes], gzip: bool) -> Iterator[bytes]:
    """Decompress a gzip (or a zlib, or a raw deflate) stream, at most :data:`PIECE` bytes per step."""
    # gzip: 16 + window; deflate: a zlib header, or (as some servers send it) raw deflate without one
    wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
    decoder = zlib.decompressobj(wbits)
    fresh = True  # nothing decoded yet: a deflate body may still turn out to be raw deflate
    for piece in pieces:
        data, produced = piece, False
        while True:
            try:
                out = decoder.decompress(data, PIECE)
            except zlib.error as error:
                if gzip or not fresh:
                    kind = "gzip" if gzip else "deflate"
                    raise BodyEncodingError(f"the body does not decode as {kind} ({error})") from None
                wbits, fresh = -zlib.MAX_WBITS, False
                decoder = zlib.decompressobj(wbits)
                continue
            fresh = False
            if out:
                produced = True
                yield out
            if decoder.eof and decoder.unused_data:  # gzip allows several members in a row
                data, decoder = decoder.unused_data, zlib.decompressobj(wbits)
                continue
            data = decoder.unconsumed_tail
            if not data and len(out) < PIECE:  # input used up and zlib has nothing more to give
                break
        if not produced:
            yield b""


__all__ = ["ACCEPT_ENCODING", "BodyEncodingError", "PIECE", "decoded_pieces"]
