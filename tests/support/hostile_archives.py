"""Hostile bundle archives: a sound bundle's tar with one thing wrong in each.

Every case starts from the members of a real, exported bundle, written by hand-made ustar
headers (so a header can say anything, which :mod:`tarfile` would refuse to write), and changes
one thing. A case gives the archive's bytes, a fragment the one-line error must contain, and the
limits to read it with (the default ones but for the "too many members" case, which would
otherwise need a million headers).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bundler.bundle.archive_read import ArchiveLimits
from bundler.bundle.archive_write import bundle_members
from bundler.fs.durable import open_dir

BLOCK = 512
RECORD = 10240
Member = tuple[str, bytes | None]  # (name, data); None for a folder


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


def _number(value: int, width: int) -> bytes:
    """An octal field, or GNU base-256 when the value does not fit (negative values too)."""
    if 0 <= value < 8 ** (width - 1):
        return _octal(value, width)
    raw = value.to_bytes(width, "big", signed=True)
    return bytes([raw[0] | 0x80 if value >= 0 else raw[0]]) + raw[1:]


def header(
    name: str | bytes,
    *,
    kind: bytes = b"0",
    size: int = 0,
    mode: int = 0o644,
    linkname: bytes = b"",
    prefix: bytes = b"",
    extra: Callable[[bytearray], None] | None = None,
) -> bytes:
    """One ustar header block, checksum included; ``extra`` may edit the block first."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else name
    block = bytearray(BLOCK)
    block[0 : len(raw[:100])] = raw[:100]
    block[100:108] = _octal(mode, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = _number(size, 12)
    block[136:148] = _octal(0, 12)
    block[156:157] = kind
    block[157 : 157 + len(linkname)] = linkname
    block[257:265] = b"ustar\x0000"
    block[329:337] = _octal(0, 8)
    block[337:345] = _octal(0, 8)
    block[345 : 345 + len(prefix)] = prefix
    if extra is not None:
        extra(block)
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def member(name: str | bytes, data: bytes | None, **fields: object) -> bytes:
    """A header and its padded data; ``None`` data makes a folder."""
    if data is None:
        text = name if isinstance(name, bytes) else name.encode()
        return header(text if text.endswith(b"/") else text + b"/", kind=b"5", mode=0o755)
    fields.setdefault("size", len(data))
    return header(name, **fields) + padded(data)  # type: ignore[arg-type]


def extended(kind: bytes, body: bytes, name: str = "PaxHeader") -> bytes:
    """An extended header of ``kind`` (pax 'x' or 'g', GNU 'L' or 'K') carrying ``body`` as is."""
    return header(name, kind=kind, size=len(body)) + padded(body)


def gnu_long(kind: bytes, value: bytes) -> bytes:
    """A GNU long name ('L') or long link ('K') record for the header after it."""
    return extended(kind, value, "././@LongLink")


def pax(records: dict[str, str | bytes], name: str = "PaxHeader") -> bytes:
    """A pax extended header ('x') with ``records``."""
    body = b""
    for key, value in records.items():
        raw = value.encode() if isinstance(value, str) else value
        text = b" " + key.encode() + b"=" + raw + b"\n"
        length = len(text) + 1
        while len(str(length)) + len(text) != length:
            length = len(str(length)) + len(text)
        body += str(length).encode() + text
    return extended(b"x", body, name)


def end(body: bytes) -> bytes:
    """The end-of-archive marker and the padding to a whole record."""
    data = body + bytes(2 * BLOCK)
    return data + bytes(-len(data) % RECORD)


def bundle_member_list(bundle: Path) -> list[Member]:
    fd = open_dir(bundle, follow=False)
    try:
        names = bundle_members(fd)
    finally:
        os.close(fd)
    return [(n, None if (bundle / n).is_dir() else (bundle / n).read_bytes()) for n in names]


CASE_NAMES = [
        "symlink", "hardlink", "dotdot", "absolute", "duplicate_file", "duplicate_root_file",
        "char_device", "block_device", "fifo", "folder_over_a_file", "file_over_a_folder",
        "file_under_a_file", "deep_under_a_file", "file_before_its_folder", "huge_declared_size",
        "too_many_members", "total_size_limit", "control_char_name", "escape_name",
        "invalid_utf8_name", "pax_path_dotdot", "pax_path_absolute", "pax_linkpath",
        "pax_size_lie", "pax_sparse", "pax_malformed", "pax_header_too_big", "global_pax_header",
        "gnu_longname_dotdot", "gnu_longname_absolute", "gnu_longname_twice",
        "gnu_longname_then_end", "gnu_longlink", "gnu_sparse", "unknown_type", "negative_size",
        "folder_with_data", "ustar_prefix_dotdot", "truncated_in_data", "truncated_at_a_header",
        "one_zero_block_then_data", "trailing_garbage", "not_a_tar", "text_file", "empty_file",
        "size_lies_larger", "size_lies_smaller", "bad_checksum", "pax_duplicate_record",
        "padding_not_zero", "padding_not_zero_after_a_pax_header", "member_not_in_checksums",
        "member_not_in_checksums_declaring_a_gibibyte", "member_before_checksums_not_in_them",
        "checksums_not_a_checksums_file",
    ]  # fmt: skip
"""Every case of :func:`cases`, by name (tests parametrize on these)."""


@dataclass
class Case:
    name: str
    data: bytes
    fragment: str
    limits: ArchiveLimits = field(default_factory=ArchiveLimits)


def cases(bundle: Path) -> list[Case]:
    """The hostile corpus, built from the sound bundle folder ``bundle``."""
    base_members = bundle_member_list(bundle)
    body = b"".join(member(n, d) for n, d in base_members)
    sound = end(body)
    first_file = next(n for n, d in base_members if d is not None and n.startswith("workspace/"))

    def plus(*extra: bytes) -> bytes:
        return end(body + b"".join(extra))

    def replaced(name: str, change: Callable[[bytes], bytes]) -> bytes:
        """The sound archive with the member ``name`` (a file) written as ``change`` makes it of
        the file's data: a member the checksums list, so only the change is at fault."""
        return end(
            b"".join(
                change(d) if n == name and d is not None else member(n, d) for n, d in base_members
            )
        )

    out = [
        Case(
            "symlink",
            plus(header("workspace/evil", kind=b"2", linkname=b"/etc/passwd")),
            "workspace/evil",
        ),
        Case(
            "hardlink",
            plus(header("workspace/evil", kind=b"1", linkname=b"config.toml")),
            "hard link",
        ),
        Case("dotdot", plus(member("workspace/../../evil", b"x")), ".."),
        Case("absolute", plus(member("/tmp/bundler-evil", b"x")), "absolute"),
        Case("duplicate_file", plus(member(first_file, b"other")), "twice"),
        Case("duplicate_root_file", plus(member("config.toml", b"[x]\n")), "twice"),
        Case("char_device", plus(header("workspace/tty", kind=b"3")), "character device"),
        Case("block_device", plus(header("workspace/sda", kind=b"4")), "block device"),
        Case("fifo", plus(header("workspace/pipe", kind=b"6")), "FIFO"),
        Case("folder_over_a_file", plus(member(first_file, None)), "twice"),
        Case("file_over_a_folder", plus(member("workspace", b"x")), "twice"),
        Case("file_under_a_file", plus(member("config.toml/x", b"x")), "which is a file"),
        Case("deep_under_a_file", plus(member("config.toml/a/b", b"x")), "which is a file"),
        Case("file_before_its_folder", plus(member("workspace/nope/x", b"x")), "before its folder"),
        Case(
            "huge_declared_size",
            plus(header("workspace/huge", size=1 << 42)),
            "declares 4.0 TiB",
        ),
        Case(
            "too_many_members",
            sound,
            "members allowed",
            ArchiveLimits(max_members=len(base_members) - 1),
        ),
        Case(
            "total_size_limit",
            sound,
            "unpacked",
            ArchiveLimits(max_total_bytes=sum(len(d or b"") for _, d in base_members) - 1),
        ),
        Case("control_char_name", plus(member("workspace/a\nb", b"x")), "control character"),
        Case("escape_name", plus(member("workspace/a\x1b[31mb", b"x")), "\\x1b"),
        Case("invalid_utf8_name", plus(member(b"workspace/\xff\xfe", b"x")), "not UTF-8"),
        Case(
            "pax_sparse",
            plus(
                pax({"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}), member("workspace/s", b"x")
            ),
            "sparse",
        ),
        Case(
            "pax_malformed",
            plus(
                extended(b"x", b"99 path=abc\n"),
                member("workspace/b", b"x"),
            ),
            "malformed pax",
        ),
        Case(
            "pax_header_too_big",
            plus(extended(b"x", bytes(1 << 20))),
            "extended header of 1.0 MiB",
        ),
        Case(
            "global_pax_header",
            plus(extended(b"g", b"", "pax_global_header")),
            "global pax header",
        ),
        Case(
            "gnu_longname_then_end",
            plus(gnu_long(b"L", b"workspace/a\0")),
            "after an extended header",
        ),
        Case(
            "gnu_longlink",
            plus(
                gnu_long(b"K", b"/etc/passwd\0"),
                header("workspace/evil", kind=b"2"),
            ),
            "link",
        ),
        Case("gnu_sparse", plus(header("workspace/sparse", kind=b"S", size=0)), "sparse"),
        Case("unknown_type", plus(header("workspace/v", kind=b"V")), "tar type V"),
        Case(
            "negative_size",
            plus(header("workspace/neg", size=-5)),
            "negative size",
        ),
        Case(
            "folder_with_data",
            plus(header("workspace/d/", kind=b"5", size=10) + padded(b"0123456789")),
            "declares data",
        ),
        Case("ustar_prefix_dotdot", plus(member("evil", b"x", prefix=b"workspace/../..")), ".."),
        Case("truncated_in_data", sound[: len(body) - 700], "truncated"),
        Case("truncated_at_a_header", body, "end-of-archive marker is missing"),
        Case(
            "one_zero_block_then_data", body + bytes(BLOCK) + member("x", b"x"), "lone zero block"
        ),
        Case("trailing_garbage", sound + b"garbage after the end\n", "after its end"),
        Case("not_a_tar", b"PK\x03\x04" + bytes(2000), "not a tar archive"),
        Case("text_file", b"hello, this is not an archive\n" * 40, "not a tar archive"),
        Case("empty_file", b"", "empty"),
        Case(
            "size_lies_larger",
            replaced(first_file, lambda d: header(first_file, size=1 << 20) + padded(d)),
            "cut short",
        ),
        Case(
            # the rest of its data is read as its padding
            "size_lies_smaller",
            replaced(first_file, lambda d: header(first_file, size=3) + padded(d + b"more" * 200)),
            "padded with bytes that are not zeros",
        ),
        Case(
            "bad_checksum",
            plus(bytearray_flip(member("workspace/x", b"x"), 0)),
            "damaged header",
        ),
    ]
    # an extended header that would rename, relink or resize the innocent member after it
    innocent = member("workspace/innocent", b"x")
    out += [
        Case(name, plus(extension, innocent), fragment)
        for name, extension, fragment in [
            ("pax_path_dotdot", pax({"path": "../x"}), ".."),
            ("pax_path_absolute", pax({"path": "/etc/cron.d/x"}), "absolute"),
            ("pax_linkpath", pax({"linkpath": "/etc/passwd"}), "link"),
            ("pax_size_lie", pax({"size": str(1 << 40)}), "declares"),
            ("gnu_longname_dotdot", gnu_long(b"L", b"../../etc/evil\0\0"), ".."),
            ("gnu_longname_absolute", gnu_long(b"L", b"/etc/evil\0"), "absolute"),
            (
                "gnu_longname_twice",
                gnu_long(b"L", b"workspace/a\0") + gnu_long(b"L", b"workspace/b\0"),
                "two extended headers",
            ),
        ]
    ]
    # the padding after a member's data, or after an extended header, not zeros: an archive
    # that differs from the sound one only where no reader looks
    padded_file = next(n for n, d in base_members if d is not None and len(d) % BLOCK)
    dirty = replaced(padded_file, lambda d: dirty_padding(member(padded_file, d)))
    out.append(Case("padding_not_zero", dirty, "padded with bytes that are not zeros"))
    out.append(
        Case(
            "padding_not_zero_after_a_pax_header",
            plus(dirty_padding(pax({"path": "workspace/innocent"})), member("x", b"x")),
            "padding that is not zeros",
        )
    )
    # a file the bundle's checksums.xxh3 does not list: refused from its header, its data never
    # written (a gibibyte declared, a few bytes sent: the archive ends where the data would)
    out.append(Case("member_not_in_checksums", plus(member("workspace/extra", b"x")), "not listed"))
    out.append(
        Case(
            "member_not_in_checksums_declaring_a_gibibyte",
            body + header("workspace/extra", size=1 << 30) + padded(b"the start of a gibibyte"),
            "workspace/extra is not listed in checksums.xxh3",
        )
    )
    # ... or one before it, in an archive of another order (refused once the list is read)
    out.append(
        Case(
            "member_before_checksums_not_in_them",
            end(member("extra.md", b"x") + b"".join(member(n, d) for n, d in base_members)),
            "extra.md is not listed in checksums.xxh3",
        )
    )
    out.append(
        Case(
            "checksums_not_a_checksums_file",
            replaced("checksums.xxh3", lambda d: member("checksums.xxh3", d + b"not a line\n")),
            "checksums.xxh3:",
        )
    )
    # a pax header with the same key twice
    dup_body = b"20 path=workspace/a\n20 path=workspace/b\n"
    out.append(
        Case(
            "pax_duplicate_record",
            plus(extended(b"x", dup_body), member("workspace/c", b"x")),
            "appears twice",
        )
    )
    return out


def dirty_padding(data: bytes) -> bytes:
    """``data`` (a header and its padded data) with its last byte, which is padding, not zero."""
    assert data[-1] == 0
    return data[:-1] + b"\xff"


def bytearray_flip(data: bytes, index: int) -> bytes:
    """``data`` with the byte at ``index`` changed (a header whose checksum no longer holds)."""
    raw = bytearray(data)
    raw[index] ^= 0x01
    return bytes(raw)
