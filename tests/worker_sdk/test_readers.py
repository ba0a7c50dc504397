"""Range readers: tensors, arrays, memmaps, tuples/dicts, Parquet row groups; ElasticDataset
reads leased ranges through them (a slice in order, a gather when shuffled)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.worker_sdk.local_master import LocalMaster
from worker_sdk import ArrayReader, ElasticDataset, MasterClient, ParquetReader
from worker_sdk.data.readers import RangeRead, RecordReader, as_reader, read_batch

pytestmark = pytest.mark.timeout(60)


def test_array_reader_slices_and_gathers_tensors_arrays_and_memmaps(tmp_path):
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    y = torch.arange(20)
    r = ArrayReader(mm, y)
    a, b = r.read(3, 7)
    assert torch.equal(a, torch.from_numpy(x[3:7])) and torch.equal(b, y[3:7])
    index = np.array([9, 2, 5])
    a, b = r.take(index)
    assert torch.equal(a, torch.from_numpy(x[index])) and b.tolist() == [9, 2, 5]
    single = ArrayReader(y).read(0, 3)
    assert isinstance(single, torch.Tensor) and single.tolist() == [0, 1, 2]
    named = ArrayReader(ids=y, x=mm).take(np.array([1, 0]))
    assert set(named) == {"ids", "x"} and named["ids"].tolist() == [1, 0]
    with pytest.raises(ValueError, match="differ in length"):
        ArrayReader(y, y[:3])


def test_as_reader_picks_the_range_path_when_it_can():
    t = torch.arange(10)
    assert isinstance(as_reader(t), ArrayReader)
    assert isinstance(as_reader((t, t.numpy())), ArrayReader)
    assert isinstance(as_reader({"a": t}), ArrayReader)
    assert isinstance(as_reader(list(range(10))), RecordReader)

    class Ranged:
        def __len__(self):
            return 10

        def read(self, start, end):
            return torch.arange(start, end) * 10

    r = as_reader(Ranged())
    assert isinstance(r, RangeRead)
    # a gather without a take(): one read of the covering range, then the rows picked
    assert r.take(np.array([7, 3, 5])).tolist() == [70, 30, 50]
    assert read_batch(r, [slice(0, 2), np.array([9, 4])]).tolist() == [0, 10, 90, 40]


def _parquet(tmp_path, n_files=2, rows=25, group=10):
    paths = []
    for f in range(n_files):
        base = f * rows
        table = pa.table({
            "id": pa.array(np.arange(base, base + rows, dtype=np.int64)),
            "x": pa.array(np.arange(base, base + rows, dtype=np.float32) / 2),
            "ids": pa.FixedSizeListArray.from_arrays(
                pa.array(np.arange(2 * base, 2 * (base + rows), dtype=np.int64)), 2),
        })
        path = tmp_path / f"part{f}.parquet"
        pq.write_table(table, path, row_group_size=group)
        paths.append(path)
    return paths


def test_parquet_reads_only_the_row_groups_a_range_covers(tmp_path):
    reader = ParquetReader(_parquet(tmp_path), columns=["id", "ids"])
    assert len(reader) == 50 and len(reader.groups) == 6  # 10 + 10 + 5 rows per file
    read = []
    real = reader._file

    wrapped = set()

    def counting(f):
        pf = real(f)
        if f in wrapped:
            return pf
        wrapped.add(f)
        original = pf.read_row_group

        def read_row_group(g, **kw):
            read.append((f, g))
            return original(g, **kw)

        pf.read_row_group = read_row_group
        return pf

    reader._file = counting
    ids, pairs = reader.read(8, 32)  # groups (0,0) (0,1) (0,2) | (1,0): across files
    assert ids.tolist() == list(range(8, 32))
    assert pairs.shape == (24, 2) and pairs[0].tolist() == [16, 17]
    assert read == [(0, 0), (0, 1), (0, 2), (1, 0)]
    read.clear()
    ids, _ = reader.take(np.array([41, 44, 40]))
    assert ids.tolist() == [41, 44, 40] and read == [(1, 1)]
    with pytest.raises(IndexError):
        reader.read(45, 51)


def _elastic(data, **kw):
    client = MasterClient(name="t", heartbeat=False, stub=LocalMaster().stub())
    return ElasticDataset(data, master=client, handle_sigterm=False, ack="next", **kw)


def test_a_shuffled_lease_is_read_as_a_permutation_of_its_range(tmp_path):
    x = torch.arange(100)
    ds = _elastic((x, x * 2), name="p", shard_size=25, shuffle=True, seed=3, max_shards=1)
    seen = []
    for a, b in ds.batches(10):
        assert torch.equal(b, a * 2)
        seen.append(a)
    flat = torch.cat(seen).tolist()
    assert sorted(flat) == list(range(100))
    for k in range(4):  # each lease (a whole shard): a permutation of exactly its range
        part = flat[25 * k:25 * k + 25]
        shard = part[0] // 25
        assert sorted(part) == list(range(25 * shard, 25 * shard + 25))
        assert part != sorted(part)


def test_batches_of_a_parquet_dataset_equal_a_plain_read(tmp_path):
    reader = ParquetReader(_parquet(tmp_path), columns=["id", "x"])
    ds = _elastic(reader, name="pq", shard_size=15, max_shards=2)
    got = [b for b in ds.batches(8)]
    ids = torch.cat([b[0] for b in got])
    assert ids.tolist() == list(range(50))  # in order: shards 0.., no shuffle
    assert torch.equal(torch.cat([b[1] for b in got]), reader.read(0, 50)[1])


def test_the_click_log_reads_the_same_from_parquet_and_from_its_memmaps(tmp_path):
    from examples.ctr.data import main as make_data
    from examples.ctr.dataset import ClickLog

    make_data(["--out", str(tmp_path), "--records", "3000", "--test-records", "100",
               "--parquet"])
    parquet = ParquetReader(tmp_path / "train.parquet", columns=["ids", "dense", "y"])
    log = ClickLog(tmp_path)
    assert len(parquet) == len(log) == 3000 and len(parquet.groups) == 1
    index = np.array([2999, 0, 1234])
    for a, b in ((parquet.read(10, 700), log.read(10, 700)), (parquet.take(index),
                                                              log.take(index))):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
