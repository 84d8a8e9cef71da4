"""Read and write TensorFlow's V2 checkpoints ("tensor bundles") without TensorFlow.

A checkpoint under the prefix ``PREFIX`` (e.g. ``bert_model.ckpt``) is two files, or more when sharded:

* ``PREFIX.data-00000-of-00001``: the tensors' raw bytes (little-endian, C order), one after another.
* ``PREFIX.index``: a sorted key/value table in TensorFlow's LevelDB-style format (``core/lib/io/table``).  The
  empty key holds a ``BundleHeaderProto`` (shard count, endianness, format version); every other key is a tensor
  name holding a ``BundleEntryProto``: dtype, shape, shard, offset and size in the data file, and masked crc32c.

The table is data blocks, an empty metaindex block, an index block and a 48-byte footer.  Every block ends with
its restart offsets and their count (uint32s) and is followed by a compression byte (0: none, the only kind
supported) and the masked crc32c of the block and that byte.  A block entry is three varints (key bytes shared
with the previous key, the other key bytes, the value's length), those key bytes, then the value.  The index block
maps a key >= each data block's last key (and < the next block's first) to the block's offset and size (varints).
The footer is the metaindex and index block handles, zero padding to 40 bytes, and a magic number.

Protobuf messages are decoded and encoded by hand (numpy and ``google_crc32c`` are the only dependencies).  The
reader checks every crc and every offset against the file sizes and raises ``CheckpointError`` on any problem.
The writer lays out the same bytes as TensorFlow's ``BundleWriter`` fed the same tensors in key order.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import google_crc32c
import numpy as np

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48  # two block handles padded to 40 bytes, then the magic
TRAILER_SIZE = 5  # compression byte + masked crc32c after every block
DEFAULT_BLOCK_SIZE = 262144  # TensorFlow's table::Options.block_size
RESTART_INTERVAL = 16  # TensorFlow's table::Options.block_restart_interval (the index block uses 1)
READ_CHUNK = 8 << 20
DT_STRING, DT_BFLOAT16 = 7, 14
# TensorFlow DataType enum -> the little-endian numpy dtype of its bytes.  bfloat16 is read as uint16 bits and
# widened (exactly) to float32, since numpy has no bfloat16.
DTYPES = {enum: np.dtype(name) for enum, name in {
    1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 8: "<c8", 9: "<i8", 10: "?", 14: "<u2",
    17: "<u2", 18: "<c16", 19: "<f2", 22: "<u4", 23: "<u8"}.items()}
ENUM_OF = {dtype.str: enum for enum, dtype in DTYPES.items() if enum != DT_BFLOAT16}
UNSUPPORTED = {7: "string", 11: "qint8", 12: "quint8", 13: "qint32", 15: "qint16", 16: "quint16",
               20: "resource", 21: "variant"}
SHARD_SUFFIX = re.compile(r"\.data-\d{5,}-of-\d{5,}$")


class CheckpointError(ValueError):
    """A checkpoint is missing, damaged or uses a feature this module does not support."""


class Malformed(Exception):
    """Raised by the byte-level parsers; the caller turns it into a CheckpointError naming the file."""


@dataclass(frozen=True)
class Entry:
    """One tensor's BundleEntryProto."""

    dtype: int  # TensorFlow DataType enum
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc: int  # masked crc32c of the tensor's bytes
    sliced: bool


# ----------------------------------------------------------------------------------------------- bytes and crcs
def mask(crc: int) -> int:
    """TensorFlow stores crc32c values rotated and offset, so that a crc of bytes holding crcs stays useful."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    return mask(google_crc32c.value(data))


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[pos:end]`` (10 bytes at most) and the position after it."""
    value = 0
    for i in range(pos, min(end, pos + 10)):
        value |= (buf[i] & 0x7F) << (7 * (i - pos))
        if buf[i] < 0x80:
            return value, i + 1
    raise Malformed("a varint is truncated or longer than 10 bytes")


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def proto_fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a protobuf message: ints for varint and fixed-width fields, bytes
    for length-delimited ones."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = read_varint(buf, pos, end)
        wire = tag & 7
        if wire == 0:
            value, pos = read_varint(buf, pos, end)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if end - pos < width:
                raise Malformed("a fixed-width protobuf field is truncated")
            value, pos = int.from_bytes(buf[pos:pos + width], "little"), pos + width
        elif wire == 2:
            length, pos = read_varint(buf, pos, end)
            if length > end - pos:
                raise Malformed("a protobuf field runs past the end of its message")
            value, pos = buf[pos:pos + length], pos + length
        else:
            raise Malformed(f"a protobuf field has the unsupported wire type {wire}")
        yield tag >> 3, value


def as_int(value: int | bytes, signed: bool = True) -> int:
    if not isinstance(value, int):
        raise Malformed("a protobuf field holds bytes where a number belongs")
    return value - (1 << 64) if signed and value >= 1 << 63 else value


def as_bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise Malformed("a protobuf field holds a number where a message belongs")
    return value


def int_field(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value) if value else b""  # proto3 leaves zeros out


def message_field(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


# ------------------------------------------------------------------------------------------------ table reading
def block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) entries of one table block, in order."""
    if len(block) < 4:
        raise Malformed("a block is shorter than its restart count")
    num_restarts = int.from_bytes(block[-4:], "little")
    if num_restarts > (len(block) - 4) // 4:
        raise Malformed("a block's restart count is larger than the block")
    limit, pos, key = len(block) - 4 * (num_restarts + 1), 0, b""
    while num_restarts and pos < limit:
        shared, pos = read_varint(block, pos, limit)
        unshared, pos = read_varint(block, pos, limit)
        value_length, pos = read_varint(block, pos, limit)
        if shared > len(key) or unshared + value_length > limit - pos:
            raise Malformed("a block entry runs past its block")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + value_length]
        pos += value_length


def read_handle(buf: bytes, pos: int = 0) -> tuple[tuple[int, int], int]:
    offset, pos = read_varint(buf, pos, len(buf))
    size, pos = read_varint(buf, pos, len(buf))
    return (offset, size), pos


def read_block(index: Path, data: bytes, handle: tuple[int, int]) -> bytes:
    offset, size = handle
    if offset + size + TRAILER_SIZE > len(data) - FOOTER_SIZE:
        raise Malformed(f"a block handle ({size} bytes at offset {offset}) points outside the file")
    end = offset + size
    if masked_crc(data[offset:end + 1]) != int.from_bytes(data[end + 1:end + TRAILER_SIZE], "little"):
        raise Malformed(f"the block at offset {offset} fails its crc32c check")
    if data[end] != 0:
        kind = "snappy" if data[end] == 1 else f"type {data[end]}"
        raise CheckpointError(f"Checkpoint index {index} uses {kind} block compression, which is not supported.")
    return data[offset:end]


def table_entries(index: Path, data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of the table held in ``data`` (the bytes of the file ``index``), in key order."""
    if len(data) < FOOTER_SIZE:
        raise Malformed(f"the file has {len(data)} bytes, fewer than a table footer ({FOOTER_SIZE})")
    footer = data[-FOOTER_SIZE:]
    if int.from_bytes(footer[-8:], "little") != TABLE_MAGIC:
        raise Malformed("the footer lacks the table magic number, so this is not a TensorFlow .index file")
    _, pos = read_handle(footer[:-8])
    index_handle, _ = read_handle(footer[:-8], pos)
    last = None
    for _, handle in block_entries(read_block(index, data, index_handle)):
        for key, value in block_entries(read_block(index, data, read_handle(handle)[0])):
            if last is not None and key <= last:
                raise Malformed("its keys are out of order")
            last = key
            yield key, value


# ------------------------------------------------------------------------------------------------ index entries
def parse_header(index: Path, value: bytes) -> int:
    """The number of shards in a BundleHeaderProto, after checking endianness and version."""
    num_shards, endianness, min_consumer = 0, 0, 0
    for field, item in proto_fields(value):
        if field == 1:
            num_shards = as_int(item)
        elif field == 2:
            endianness = as_int(item)
        elif field == 3:
            min_consumer = dict((f, as_int(v)) for f, v in proto_fields(as_bytes(item))).get(2, 0)
    if endianness != 0:
        raise CheckpointError(f"Checkpoint index {index} is big-endian, which is not supported.")
    if min_consumer > 1:
        raise CheckpointError(f"Checkpoint index {index} needs a newer reader (format min_consumer {min_consumer}).")
    if num_shards < 1:
        raise Malformed(f"its header says {num_shards} shards")
    return num_shards


def parse_shape(value: bytes) -> tuple[int, ...] | None:
    """The dimensions of a TensorShapeProto; None when its rank is unknown."""
    dims = []
    for field, item in proto_fields(value):
        if field == 2:
            dims.append(next((as_int(v) for f, v in proto_fields(as_bytes(item)) if f == 1), 0))
        elif field == 3 and as_int(item):
            return None
    return tuple(dims)


def parse_entry(name: str, value: bytes, num_shards: int) -> Entry:
    numbers, shape, sliced = {1: 0, 3: 0, 4: 0, 5: 0, 6: 0}, (), False
    for field, item in proto_fields(value):
        if field == 2:
            shape = parse_shape(as_bytes(item))
        elif field == 7:
            sliced = True
        elif field in numbers:
            numbers[field] = as_int(item, signed=field != 6)
    if shape is None or any(d < 0 for d in shape) or numbers[4] < 0 or numbers[5] < 0:
        raise Malformed(f"tensor {name!r} has an unknown or negative dimension, offset or size")
    if not 0 <= numbers[3] < num_shards:
        raise Malformed(f"tensor {name!r} is in shard {numbers[3]} of {num_shards}")
    return Entry(numbers[1], shape, numbers[3], numbers[4], numbers[5], numbers[6], sliced)


def encode_entry(dtype: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    dims = b"".join(message_field(2, int_field(1, d)) for d in shape)
    crc_field = b"\x35" + struct.pack("<I", crc) if crc else b""  # field 6, fixed32
    return int_field(1, dtype) + message_field(2, dims) + int_field(4, offset) + int_field(5, size) + crc_field


HEADER = int_field(1, 1) + message_field(3, int_field(1, 1))  # num_shards 1, LITTLE, version {producer: 1}


def read_index(prefix: Path) -> tuple[int, dict[str, Entry]]:
    """The number of data shards and the entry of every tensor, in key order."""
    index = Path(f"{prefix}.index")
    if not index.is_file():
        raise CheckpointError(f"Checkpoint index {index} does not exist.")
    try:
        items = table_entries(index, index.read_bytes())
        key, header = next(items, (None, b""))
        if key != b"":
            raise Malformed("it has no header entry")
        num_shards = parse_header(index, header)
        entries = {}
        for key, value in items:
            name = key.decode(errors="replace")
            if name.encode() != key:
                raise Malformed(f"the tensor name {name!r} is not UTF-8")
            entries[name] = parse_entry(name, value, num_shards)
    except Malformed as error:
        raise CheckpointError(f"Corrupt checkpoint index {index}: {error}.") from None
    return num_shards, entries


def entry_dtype(index: Path, name: str, entry: Entry) -> np.dtype:
    """The numpy dtype of an entry's bytes (object for strings), once its dtype, slicing and size are checked."""
    if entry.sliced:
        raise CheckpointError(f"Checkpoint index {index}: tensor {name!r} is a partitioned variable saved in slices, "
                              "which is not supported.")
    if entry.dtype == DT_STRING:
        return np.dtype(object)
    if entry.dtype not in DTYPES:
        kind = UNSUPPORTED.get(entry.dtype, "unknown")
        raise CheckpointError(f"Checkpoint index {index}: tensor {name!r} has the unsupported dtype {kind} "
                              f"(DataType {entry.dtype}).")
    dtype = DTYPES[entry.dtype]
    if entry.size != math.prod(entry.shape) * dtype.itemsize:
        raise CheckpointError(f"Corrupt checkpoint index {index}: tensor {name!r} of shape {entry.shape} should take "
                              f"{math.prod(entry.shape) * dtype.itemsize} bytes, but its entry says {entry.size}.")
    return dtype


# ------------------------------------------------------------------------------------------------ table writing
class BlockWriter:
    """Builds one table block the way TensorFlow's BlockBuilder does."""

    def __init__(self, restart_interval: int) -> None:
        self.interval, self.buffer, self.restarts, self.count, self.last = restart_interval, bytearray(), [0], 0, b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count == self.interval:
            self.restarts.append(len(self.buffer))
            self.count = 0
        else:
            shared = common_prefix(self.last, key)
        self.buffer += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        self.last, self.count = key, self.count + 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return bytes(self.buffer) + struct.pack(f"<{len(self.restarts) + 1}I", *self.restarts, len(self.restarts))


def common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short key >= start and < limit (TensorFlow's FindShortestSeparator)."""
    n = common_prefix(start, limit)
    if n < min(len(start), len(limit)) and start[n] < 0xFF and start[n] + 1 < limit[n]:
        return start[:n] + bytes([start[n] + 1])
    return start


def short_successor(key: bytes) -> bytes:
    """A short key >= key (TensorFlow's FindShortSuccessor)."""
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes([byte + 1])
    return key


def build_table(items: Iterable[tuple[bytes, bytes]], block_size: int = DEFAULT_BLOCK_SIZE) -> bytes:
    """The bytes of a table holding ``items`` (sorted by key), as TensorFlow's TableBuilder lays them out."""
    out, index, block = bytearray(), BlockWriter(1), BlockWriter(RESTART_INTERVAL)
    pending, last = None, b""  # the handle of the last block written, until the next key gives its index key

    def write(contents: bytes) -> bytes:
        handle = varint(len(out)) + varint(len(contents))
        out.extend(contents + b"\0" + struct.pack("<I", masked_crc(contents + b"\0")))
        return handle

    for key, value in items:
        if block.buffer and len(key) + len(value) >= 2 * block_size:
            pending, block = write(block.finish()), BlockWriter(RESTART_INTERVAL)
        if pending is not None:
            index.add(shortest_separator(last, key), pending)
            pending = None
        block.add(key, value)
        last = key
        if block.size_estimate() >= block_size:
            pending, block = write(block.finish()), BlockWriter(RESTART_INTERVAL)
    if block.buffer:
        pending = write(block.finish())
    metaindex = write(BlockWriter(RESTART_INTERVAL).finish())
    if pending is not None:
        index.add(short_successor(last), pending)
    handles = metaindex + write(index.finish())
    return bytes(out + handles.ljust(FOOTER_SIZE - 8, b"\0") + struct.pack("<Q", TABLE_MAGIC))


# ------------------------------------------------------------------------------------------------- public API
def data_path(prefix: Path, shard: int, num_shards: int) -> Path:
    return Path(f"{prefix}.data-{shard:05d}-of-{num_shards:05d}")


def checkpoint_prefix(path: str | os.PathLike[str]) -> Path:
    """The prefix of a checkpoint given as its folder (holding exactly one ``*.index``), prefix, or a file."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("*.index"))
        if len(found) != 1:
            listed = f" ({', '.join(p.name for p in found)})" if found else ""
            raise CheckpointError(f"Folder {path} holds {len(found)} checkpoint .index files{listed}, not one; "
                                  "pass the checkpoint's prefix instead.")
        path = found[0]
    if path.name.endswith(".index"):
        return Path(str(path)[:-len(".index")])
    return Path(SHARD_SUFFIX.sub("", str(path)))


def list_variables(prefix: str | os.PathLike[str]) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """Every tensor's numpy dtype and shape, in key order, from the .index file alone.  String tensors are listed
    with dtype object (``read_checkpoint`` refuses them); bfloat16 ones as float32, as they are read."""
    prefix = checkpoint_prefix(prefix)
    index = Path(f"{prefix}.index")
    listed = {}
    for name, entry in read_index(prefix)[1].items():
        dtype = entry_dtype(index, name, entry)
        listed[name] = (np.dtype(np.float32) if entry.dtype == DT_BFLOAT16 else dtype.newbyteorder("="), entry.shape)
    return listed


def read_tensor(file: BinaryIO, path: Path, name: str, entry: Entry, dtype: np.dtype) -> np.ndarray:
    size = os.fstat(file.fileno()).st_size
    if entry.offset + entry.size > size:
        raise CheckpointError(f"Truncated checkpoint data {path}: tensor {name!r} needs bytes {entry.offset} to "
                              f"{entry.offset + entry.size}, but the file has {size}.")
    buffer, crc, got = bytearray(entry.size), 0, 0
    file.seek(entry.offset)
    while got < entry.size:
        chunk = file.read(min(READ_CHUNK, entry.size - got))
        if not chunk:
            raise CheckpointError(f"Truncated checkpoint data {path}: it ended while tensor {name!r} was read.")
        buffer[got:got + len(chunk)] = chunk
        crc, got = google_crc32c.extend(crc, chunk), got + len(chunk)
    if mask(crc) != entry.crc:
        raise CheckpointError(f"Corrupt checkpoint data {path}: tensor {name!r} fails its crc32c check.")
    array = np.frombuffer(buffer, dtype).reshape(entry.shape)
    if entry.dtype == DT_BFLOAT16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array if dtype.isnative else array.astype(dtype.newbyteorder("="))


def read_checkpoint(prefix: str | os.PathLike[str], names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The tensors of a checkpoint (all, or just ``names``, in that order) as writable arrays, every crc checked."""
    prefix = checkpoint_prefix(prefix)
    index = Path(f"{prefix}.index")
    num_shards, entries = read_index(prefix)
    wanted = list(entries) if names is None else [names] if isinstance(names, str) else list(names)
    missing = [name for name in wanted if name not in entries]
    if missing:
        raise CheckpointError(f"Checkpoint index {index} has no tensor named {', '.join(map(repr, missing))}.")
    files, tensors = {}, {}
    try:
        for name in wanted:
            entry = entries[name]
            dtype = entry_dtype(index, name, entry)
            if entry.dtype == DT_STRING:
                raise CheckpointError(f"Checkpoint index {index}: tensor {name!r} is a string tensor, which is not "
                                      "supported; pass names= to read the others.")
            path = data_path(prefix, entry.shard, num_shards)
            if entry.shard not in files:
                if not path.is_file():
                    raise CheckpointError(f"Checkpoint data file {path} (shard {entry.shard + 1} of {num_shards}) "
                                          "is missing.")
                files[entry.shard] = open(path, "rb")
            tensors[name] = read_tensor(files[entry.shard], path, name, entry, dtype)
    finally:
        for file in files.values():
            file.close()
    return tensors


def write_checkpoint(prefix: str | os.PathLike[str], tensors: Mapping[str, np.ndarray], *,
                     block_size: int = DEFAULT_BLOCK_SIZE) -> None:
    """Write ``PREFIX.index`` and ``PREFIX.data-00000-of-00001`` as TensorFlow's BundleWriter would (tensors in
    key order, so the bytes depend only on the tensors).  Each file is written aside and then moved into place."""
    prefix = Path(prefix)
    arrays = []
    for name, value in tensors.items():
        if not isinstance(name, str) or not name:
            raise CheckpointError(f"Cannot write checkpoint {prefix}: tensor names must be non-empty strings, "
                                  f"not {name!r}.")
        array = np.asarray(value)
        little = array.dtype.newbyteorder("<")
        if little.str not in ENUM_OF:
            raise CheckpointError(f"Cannot write checkpoint {prefix}: tensor {name!r} has dtype {array.dtype}, "
                                  "which has no TensorFlow equivalent here.")
        arrays.append((name.encode(), array.astype(little, copy=False)))
    arrays.sort(key=lambda item: item[0])
    prefix.parent.mkdir(parents=True, exist_ok=True)
    data, index = data_path(prefix, 0, 1), Path(f"{prefix}.index")
    items, offset = [(b"", HEADER)], 0
    with open(f"{data}.tmp", "wb") as file:
        for key, array in arrays:
            raw = array.tobytes()
            file.write(raw)
            items.append((key, encode_entry(ENUM_OF[array.dtype.str], array.shape, offset, len(raw), masked_crc(raw))))
            offset += len(raw)
    Path(f"{index}.tmp").write_bytes(build_table(items, block_size))
    os.replace(f"{data}.tmp", data)
    os.replace(f"{index}.tmp", index)
