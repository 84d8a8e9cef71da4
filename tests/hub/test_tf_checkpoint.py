"""hfbert.tf_checkpoint: TensorFlow V2 checkpoints (tensor bundles) read and written without TensorFlow."""

import struct

import google_crc32c
import numpy as np
import pytest

from hfbert.tf_checkpoint import (
    HEADER,
    CheckpointError,
    Malformed,
    block_entries,
    build_table,
    checkpoint_prefix,
    encode_entry,
    int_field,
    list_variables,
    masked_crc,
    message_field,
    proto_fields,
    read_checkpoint,
    read_handle,
    write_checkpoint,
)

DATA = ".data-00000-of-00001"


def tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "bert/embeddings/word_embeddings": rng.standard_normal((7, 4)).astype(np.float32),
        "global_step": np.int64(123456789012),
        "bert/pooler/dense/bias": rng.standard_normal(5).astype(np.float16),
        "mask": np.array([[True, False, True]]),
        "empty": np.zeros((0, 3), np.float32),
        "special": np.array([np.nan, -0.0, np.inf, -np.inf, 1e-45], np.float32),
        "f64": rng.standard_normal((2, 2, 2)),
        "i32": np.array([-(2**31), 2**31 - 1], np.int32),
        "i8": np.array([-128, 127], np.int8),
        "u8": np.arange(256, dtype=np.uint8),
        "i16": np.array([-3], np.int16),
        "u16": np.array([65535], np.uint16),
        "u32": np.array([2**32 - 1], np.uint32),
        "u64": np.array([2**64 - 1], np.uint64),
        "c64": np.array([1 + 2j], np.complex64),
        "c128": np.array([[3 - 4j]], np.complex128),
    }


def saved(tmp_path, contents=None, **options):
    prefix = tmp_path / "model.ckpt"
    write_checkpoint(prefix, tensors() if contents is None else contents, **options)
    return prefix


def index_of(prefix):
    return prefix.with_name(prefix.name + ".index")


def data_of(prefix, name=DATA):
    return prefix.with_name(prefix.name + name)


def flip(path, position):
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def write_raw(prefix, entries, shards=None, header=HEADER):
    """A checkpoint whose entries (name -> BundleEntryProto bytes) and data shards are given as they are."""
    items = [(b"", header)] + sorted((name.encode(), value) for name, value in entries.items())
    index_of(prefix).write_bytes(build_table(items))
    for name, data in (shards or {}).items():
        data_of(prefix, name).write_bytes(data)
    return prefix


# ------------------------------------------------------------------------------------------------- round trips
def test_round_trip_is_bitwise(tmp_path):
    prefix = saved(tmp_path)
    back = read_checkpoint(prefix)
    assert list(back) == sorted(tensors())
    for name, original in tensors().items():
        original = np.asarray(original)
        assert back[name].dtype == original.dtype and back[name].shape == original.shape, name
        assert back[name].tobytes() == original.tobytes(), name
        assert back[name].flags.writeable and back[name].flags.c_contiguous, name
    back["global_step"][...] = 1  # writable copies


def test_non_native_and_non_contiguous_inputs(tmp_path):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    contents = {"big_endian": base.astype(">f4"), "transposed": base.T, "fortran": np.asfortranarray(base),
                "strided": base[:, ::2], "python_float": 2.5}
    back = read_checkpoint(saved(tmp_path, contents))
    for name, value in contents.items():
        np.testing.assert_array_equal(back[name], value)
        assert back[name].dtype.isnative
    assert back["big_endian"].dtype == np.float32 and back["python_float"].dtype == np.float64


def test_empty_checkpoint_and_unicode_names(tmp_path):
    assert read_checkpoint(saved(tmp_path, {})) == {}
    back = read_checkpoint(saved(tmp_path, {"bert/Gewicht-ü": np.ones(2, np.float32)}))
    assert list(back) == ["bert/Gewicht-ü"]


def test_output_is_deterministic_and_independent_of_insertion_order(tmp_path):
    first = saved(tmp_path / "a")
    second = saved(tmp_path / "b", dict(reversed(list(tensors().items()))))
    assert index_of(first).read_bytes() == index_of(second).read_bytes()
    assert data_of(first).read_bytes() == data_of(second).read_bytes()
    assert not list(tmp_path.rglob("*.tmp"))


def test_many_tensors_span_several_blocks(tmp_path):
    contents = {f"bert/encoder/layer_{i}/attention/self/{part}": np.full((i % 3 + 1,), i, np.float32)
                for i in range(60) for part in ("query/kernel", "query/bias", "key/kernel")}
    prefix = saved(tmp_path, contents, block_size=256)
    data = index_of(prefix).read_bytes()
    (offset, size), _ = read_handle(data[-48:-8], read_handle(data[-48:-8])[1])
    assert len(list(block_entries(data[offset:offset + size]))) > 10  # index block: one entry per data block
    assert list(list_variables(prefix)) == sorted(contents)
    back = read_checkpoint(prefix)
    assert all(np.array_equal(back[name], value) for name, value in contents.items())
    # The default block size puts everything into one data block.
    data = index_of(saved(tmp_path / "big", contents)).read_bytes()
    (offset, size), _ = read_handle(data[-48:-8], read_handle(data[-48:-8])[1])
    assert len(list(block_entries(data[offset:offset + size]))) == 1


def test_list_variables_reads_only_the_index(tmp_path):
    prefix = saved(tmp_path)
    data_of(prefix).unlink()
    listed = list_variables(prefix)
    assert list(listed) == sorted(tensors())
    assert listed["bert/embeddings/word_embeddings"] == (np.dtype(np.float32), (7, 4))
    assert listed["global_step"] == (np.dtype(np.int64), ())
    assert listed["empty"] == (np.dtype(np.float32), (0, 3))
    with pytest.raises(CheckpointError, match=r"model\.ckpt\.data-00000-of-00001 \(shard 1 of 1\) is missing"):
        read_checkpoint(prefix)


def test_read_some_names(tmp_path):
    prefix = saved(tmp_path)
    assert list(read_checkpoint(prefix, ["mask", "global_step"])) == ["mask", "global_step"]
    assert list(read_checkpoint(prefix, "mask")) == ["mask"]
    with pytest.raises(CheckpointError, match="has no tensor named 'nope'"):
        read_checkpoint(prefix, ["mask", "nope"])


def test_writer_refuses_what_tensorflow_cannot_hold(tmp_path):
    with pytest.raises(CheckpointError, match="has dtype object"):
        write_checkpoint(tmp_path / "x", {"a": np.array([b"x", None], dtype=object)})
    with pytest.raises(CheckpointError, match="has dtype <U"):
        write_checkpoint(tmp_path / "x", {"a": np.array(["text"])})
    with pytest.raises(CheckpointError, match="non-empty strings"):
        write_checkpoint(tmp_path / "x", {"": np.zeros(1)})


# ------------------------------------------------------------------------------------------ an index by hand
def vint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
    return out + bytes([n])


def tf_mask(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return ((crc >> 15 | crc << 17) + 0xA282EAD8) % 2**32


def with_trailer(block: bytes) -> bytes:
    return block + b"\x00" + struct.pack("<I", tf_mask(block + b"\x00"))


def test_reads_a_hand_assembled_checkpoint_and_writes_the_same_bytes(tmp_path):
    """The bytes below follow TensorFlow's tensor_bundle.cc / table_builder.cc, spelled out field by field."""
    bias, kernel = struct.pack("<2f", 1.5, -2.0), struct.pack("<2i", 3, -4)
    header = bytes([0x08, 1, 0x1A, 2, 0x08, 1])  # num_shards=1, (endianness LITTLE=0 left out), version{producer=1}
    bias_entry = (bytes([0x08, 1])  # dtype DT_FLOAT
                  + bytes([0x12, 4, 0x12, 2, 0x08, 2])  # shape {dim {size: 2}}
                  + bytes([0x28, 8])  # size 8 (shard_id 0 and offset 0 left out)
                  + b"\x35" + struct.pack("<I", tf_mask(bias)))  # crc32c, fixed32
    kernel_entry = (bytes([0x08, 3])  # DT_INT32
                    + bytes([0x12, 8, 0x12, 2, 0x08, 1, 0x12, 2, 0x08, 2])  # shape [1, 2]
                    + bytes([0x20, 8, 0x28, 8])  # offset 8, size 8
                    + b"\x35" + struct.pack("<I", tf_mask(kernel)))
    data_block = (bytes([0, 0, len(header)]) + header  # key "" (shared 0, unshared 0)
                  + bytes([0, 10, len(bias_entry)]) + b"layer/bias" + bias_entry
                  + bytes([6, 6, len(kernel_entry)]) + b"kernel" + kernel_entry  # shares "layer/"
                  + struct.pack("<II", 0, 1))  # restart offsets [0], one restart
    metaindex = struct.pack("<II", 0, 1)  # an empty block
    handle = vint(0) + vint(len(data_block))
    index_block = bytes([0, 1, len(handle)]) + b"m" + handle + struct.pack("<II", 0, 1)  # "m": successor of "l..."
    meta_at = len(data_block) + 5
    index_at = meta_at + len(metaindex) + 5
    footer = (vint(meta_at) + vint(len(metaindex)) + vint(index_at) + vint(len(index_block))).ljust(40, b"\0")
    index_bytes = (with_trailer(data_block) + with_trailer(metaindex) + with_trailer(index_block)
                   + footer + bytes.fromhex("57fb808b247547db"))
    prefix = tmp_path / "hand" / "bert_model.ckpt"
    prefix.parent.mkdir()
    index_of(prefix).write_bytes(index_bytes)
    data_of(prefix).write_bytes(bias + kernel)

    assert list_variables(prefix.parent) == {"layer/bias": (np.dtype(np.float32), (2,)),
                                             "layer/kernel": (np.dtype(np.int32), (1, 2))}
    back = read_checkpoint(prefix)
    np.testing.assert_array_equal(back["layer/bias"], np.array([1.5, -2.0], np.float32))
    np.testing.assert_array_equal(back["layer/kernel"], np.array([[3, -4]], np.int32))

    written = saved(tmp_path, back)
    assert index_of(written).read_bytes() == index_bytes
    assert data_of(written).read_bytes() == bias + kernel


# ------------------------------------------------------------------------------------------------- corruption
def test_flipped_index_block_byte_is_a_corrupt_index(tmp_path):
    prefix = saved(tmp_path)
    flip(index_of(prefix), 20)
    with pytest.raises(CheckpointError, match=r"Corrupt checkpoint index .*model\.ckpt\.index: .*crc32c"):
        list_variables(prefix)


def test_truncated_or_foreign_index(tmp_path):
    prefix = saved(tmp_path)
    data = index_of(prefix).read_bytes()
    index_of(prefix).write_bytes(data[:10])
    with pytest.raises(CheckpointError, match="10 bytes, fewer than a table footer"):
        read_checkpoint(prefix)
    index_of(prefix).write_bytes(b"")
    with pytest.raises(CheckpointError, match="0 bytes"):
        read_checkpoint(prefix)
    index_of(prefix).write_bytes(data[:-1] + b"\0")
    with pytest.raises(CheckpointError, match="magic number"):
        read_checkpoint(prefix)


@pytest.mark.slow
def test_every_flipped_or_truncated_index_is_handled(tmp_path):
    prefix = saved(tmp_path, {"a/b": np.ones(2, np.float32), "a/c": np.int64(3)})
    data = index_of(prefix).read_bytes()
    (meta_at, meta_size), _ = read_handle(data[-48:-8])
    unread = set(range(meta_at, meta_at + meta_size + 5)) | set(range(len(data) - 48, len(data) - 8))
    for position in range(len(data)):
        flip(index_of(prefix), position)
        try:
            read_checkpoint(prefix)
            assert position in unread  # TensorFlow does not read the metaindex block or the footer padding either
        except CheckpointError as error:
            assert "model.ckpt.index" in str(error) and "\n" not in str(error)
        index_of(prefix).write_bytes(data)
    for length in range(len(data)):
        index_of(prefix).write_bytes(data[:length])
        with pytest.raises(CheckpointError):
            read_checkpoint(prefix)


def test_block_handle_outside_the_file(tmp_path):
    prefix = saved(tmp_path)
    data = index_of(prefix).read_bytes()
    footer = (vint(0) + vint(8) + vint(10**9) + vint(100)).ljust(40, b"\0") + data[-8:]
    index_of(prefix).write_bytes(data[:-48] + footer)
    with pytest.raises(CheckpointError, match="points outside the file"):
        list_variables(prefix)


def test_compressed_blocks_are_refused(tmp_path):
    prefix = saved(tmp_path, {"a": np.ones(1, np.float32)})
    data = bytearray(index_of(prefix).read_bytes())
    (offset, size), _ = read_handle(bytes(data[-48:-8]), read_handle(bytes(data[-48:-8]))[1])
    block = bytes(data[offset:offset + size])
    data[offset + size:offset + size + 5] = b"\x01" + struct.pack("<I", tf_mask(block + b"\x01"))
    index_of(prefix).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="snappy block compression"):
        list_variables(prefix)


def test_truncated_data(tmp_path):
    prefix = saved(tmp_path)
    data_of(prefix).write_bytes(data_of(prefix).read_bytes()[:130])
    with pytest.raises(CheckpointError, match=r"Truncated checkpoint data .*\.data-00000-of-00001: tensor"):
        read_checkpoint(prefix)
    assert read_checkpoint(prefix, ["bert/pooler/dense/bias"])  # a tensor before the cut still reads


def test_flipped_tensor_byte_fails_its_crc(tmp_path):
    prefix = saved(tmp_path)
    flip(data_of(prefix), 3)
    with pytest.raises(CheckpointError, match=r"Corrupt checkpoint data .*: tensor 'bert/embeddings/word_embed"
                                              r"dings' fails its crc32c check"):
        read_checkpoint(prefix)


def test_entry_beyond_the_data_file_and_wrong_size(tmp_path):
    data = np.ones(2, np.float32).tobytes()
    prefix = write_raw(tmp_path / "x", {"far": encode_entry(1, (2,), 100, 8, masked_crc(data))}, {DATA: data})
    with pytest.raises(CheckpointError, match="Truncated checkpoint data .*'far' needs bytes 100 to 108"):
        read_checkpoint(prefix)
    prefix = write_raw(tmp_path / "y", {"odd": encode_entry(1, (2, 3), 0, 8, masked_crc(data))}, {DATA: data})
    with pytest.raises(CheckpointError, match=r"'odd' of shape \(2, 3\) should take 24 bytes"):
        list_variables(prefix)


def test_unsupported_dtypes_and_slices(tmp_path):
    entries = {"graph": encode_entry(7, (), 0, 5, 1), "w": encode_entry(1, (1,), 5, 4, masked_crc(b"\0" * 4))}
    prefix = write_raw(tmp_path / "s", entries, {DATA: b"\0" * 9})
    assert list_variables(prefix)["graph"] == (np.dtype(object), ())
    with pytest.raises(CheckpointError, match="'graph' is a string tensor, which is not supported"):
        read_checkpoint(prefix)
    assert read_checkpoint(prefix, ["w"])["w"].tolist() == [0.0]
    prefix = write_raw(tmp_path / "v", {"v": encode_entry(21, (), 0, 0, 0)})
    with pytest.raises(CheckpointError, match=r"unsupported dtype variant \(DataType 21\)"):
        list_variables(prefix)
    prefix = write_raw(tmp_path / "p", {"part": encode_entry(1, (4,), 0, 0, 0) + message_field(7, b"")})
    with pytest.raises(CheckpointError, match="'part' is a partitioned variable"):
        read_checkpoint(prefix)


def test_bfloat16_reads_as_float32(tmp_path):
    bits = struct.pack("<2H", 0x3F80, 0xC020)  # 1.0, -2.5
    prefix = write_raw(tmp_path / "b", {"w": encode_entry(14, (2,), 0, 4, masked_crc(bits))}, {DATA: bits})
    assert list_variables(prefix)["w"] == (np.dtype(np.float32), (2,))
    assert read_checkpoint(prefix)["w"].tolist() == [1.0, -2.5]


def test_sharded_checkpoints(tmp_path):
    one, two = np.ones(2, np.float32).tobytes(), np.full(1, 7, np.int64).tobytes()
    header = int_field(1, 2) + message_field(3, int_field(1, 1))
    entries = {"a": encode_entry(1, (2,), 0, 8, masked_crc(one)),
               "b": encode_entry(9, (), 0, 8, masked_crc(two)) + int_field(3, 1)}
    prefix = write_raw(tmp_path / "m", entries, {".data-00000-of-00002": one, ".data-00001-of-00002": two},
                       header=header)
    assert read_checkpoint(prefix)["b"] == 7
    data_of(prefix, ".data-00001-of-00002").unlink()
    with pytest.raises(CheckpointError, match=r"m\.data-00001-of-00002 \(shard 2 of 2\) is missing"):
        read_checkpoint(prefix)
    prefix = write_raw(tmp_path / "n", {"b": entries["b"]})
    with pytest.raises(CheckpointError, match="'b' is in shard 1 of 1"):
        list_variables(prefix)


def test_headers_the_reader_refuses(tmp_path):
    big = int_field(1, 1) + int_field(2, 1) + message_field(3, int_field(1, 1))
    with pytest.raises(CheckpointError, match="big-endian"):
        list_variables(write_raw(tmp_path / "big", {}, header=big))
    newer = int_field(1, 1) + message_field(3, int_field(1, 2) + int_field(2, 2))
    with pytest.raises(CheckpointError, match="newer reader"):
        list_variables(write_raw(tmp_path / "new", {}, header=newer))
    index_of(tmp_path / "none").write_bytes(build_table([(b"a", encode_entry(1, (), 0, 4, 0))]))
    with pytest.raises(CheckpointError, match="no header entry"):
        list_variables(tmp_path / "none")


def test_missing_index(tmp_path):
    with pytest.raises(CheckpointError, match=r"Checkpoint index .*nothing\.index does not exist"):
        read_checkpoint(tmp_path / "nothing")


def test_parsers_are_bounded():
    with pytest.raises(Malformed, match="longer than 10 bytes"):
        list(proto_fields(b"\x08" + b"\xff" * 20))
    with pytest.raises(Malformed, match="runs past"):
        list(proto_fields(b"\x12\xff\xff\xff\xff\x0f"))  # a 4 GiB field in a 6-byte message
    with pytest.raises(Malformed, match="restart count"):
        list(block_entries(b"\xff\xff\xff\xff"))
    with pytest.raises(Malformed, match="runs past its block"):
        list(block_entries(bytes([0, 100, 0]) + struct.pack("<II", 0, 1)))


# ------------------------------------------------------------------------------------------------ prefixes
def test_checkpoint_prefix(tmp_path):
    prefix = saved(tmp_path / "run")
    assert checkpoint_prefix(tmp_path / "run") == prefix
    assert checkpoint_prefix(prefix) == prefix
    assert checkpoint_prefix(str(index_of(prefix))) == prefix
    assert checkpoint_prefix(data_of(prefix)) == prefix
    assert list(read_checkpoint(tmp_path / "run")) == sorted(tensors())
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds 0 checkpoint .index files, not one"):
        checkpoint_prefix(tmp_path / "empty")
    write_checkpoint(tmp_path / "run" / "model.ckpt-2000", {})
    with pytest.raises(CheckpointError, match=r"holds 2 checkpoint .index files \(model\.ckpt-2000\.index, "
                                              r"model\.ckpt\.index\)"):
        checkpoint_prefix(tmp_path / "run")
