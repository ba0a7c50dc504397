"""The frame encodings both sides share: one frame per tensor, and small tensors packed into one."""
from __future__ import annotations

import threading

import pytest
import torch

from pswire import frames as frames_module
from pswire.frames import (PACK_BELOW_BYTES, Decoder, as_buffer, decode, frames_of, meta_of,
                           pack, packing)
from protos import ps_pb2
from rpckit.errors import ServiceError

BIG = PACK_BELOW_BYTES // 4  # float32 elements of a tensor that is sent alone


def test_packing_takes_the_small_tensors_of_the_first_small_dtype():
    ts = [torch.zeros(BIG), torch.zeros(3), torch.zeros(2, dtype=torch.float64),
          torch.zeros(4, 2), torch.zeros(0)]
    assert packing(ts) == ([1, 3, 4], [0, 2])
    assert packing([torch.zeros(3)]) == ([], [0])  # one is not worth a pack
    assert packing([torch.zeros(BIG), torch.zeros(3)]) == ([], [0, 1])
    assert packing([]) == ([], [])


def _wire(tensors: dict) -> tuple[list, list, int]:
    """What a sender puts on the wire: metas (packed first) and frames."""
    names = list(tensors)
    packed, alone = packing([tensors[n] for n in names])
    frames = [as_buffer(pack([tensors[names[i]] for i in packed]))] if packed else []
    frames += [as_buffer(tensors[names[i]]) for i in alone]
    metas = [meta_of(names[i], tensors[names[i]]) for i in packed + alone]
    return metas, [bytes(f) for f in frames], len(packed)


def test_decode_reads_back_packed_and_single_frames_as_views():
    g = torch.Generator().manual_seed(0)
    tensors = {"big": torch.randn(BIG, generator=g), "w": torch.randn(3, 4, generator=g),
               "half": torch.randn(5, generator=g).to(torch.float16),
               "b": torch.randn(4, generator=g), "empty": torch.zeros(0, 2)}
    metas, frames, packed_count = _wire(tensors)
    assert packed_count == 3 and len(frames) == frames_of(len(metas), packed_count) == 3
    got, flat = decode(metas, frames, packed_count)
    assert [n for n, _ in got] == ["w", "b", "empty", "big", "half"]
    for name, t in got:
        assert torch.equal(t, tensors[name]) and t.dtype == tensors[name].dtype
    assert flat.numel() == 12 + 4 and got[0][1].data_ptr() == flat.data_ptr()  # no copy
    unpacked, none = decode(*_wire({"w": tensors["w"]})[:2])
    assert none is None and torch.equal(unpacked[0][1], tensors["w"])


@pytest.mark.parametrize("case", ["frames", "count1", "count_over", "dtypes", "size", "allowed"])
def test_decode_refuses_frames_that_do_not_fit(case):
    a, b = torch.ones(3), torch.ones(2)
    metas, frames, k = [meta_of("a", a), meta_of("b", b)], [bytes(as_buffer(pack([a, b])))], 2
    allowed = ("float32",)
    if case == "frames":
        frames = frames + [b""]
    elif case == "count1":
        k = 1
    elif case == "count_over":
        k = 3
    elif case == "dtypes":
        metas[1] = meta_of("b", b.double())
    elif case == "size":
        frames = [frames[0][:-4]]
    else:
        allowed = ("float64",)
    with pytest.raises(ServiceError) as err:
        decode(metas, frames, k, allowed)
    assert err.value.code == "INVALID_ARGUMENT"


def _answer(tensors: dict):
    """Metas as a received message holds them (a parsed PullResult), and the frames."""
    metas, frames, k = _wire(tensors)
    msg = ps_pb2.PullResult(tensors=metas, packed_count=k)
    return ps_pb2.PullResult.FromString(msg.SerializeToString()).tensors, frames, k


@pytest.mark.parametrize("reuse", [False, True])
def test_the_decoder_reuses_its_checks_only_while_the_metas_repeat(reuse):
    g = torch.Generator().manual_seed(1)
    dec = Decoder(reuse=reuse)
    steps = [  # the same metas twice, then each thing the checks depend on changed
        {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g)},
        {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g)},
        {"w": torch.randn(4, 3, generator=g), "b": torch.randn(4, generator=g)},  # a shape
        {"w": torch.randn(4, 3, generator=g), "c": torch.randn(4, generator=g)},  # a name
        {"w": torch.randn(4, 3, generator=g).double(), "c": torch.randn(4, generator=g)},
        {"w": torch.randn(BIG, generator=g), "c": torch.randn(4, generator=g)},  # no pack
    ]
    for tensors in steps:
        for peer in (0, 1):
            metas, frames, k = _answer(tensors)
            got, _ = dec.decode(peer, metas, frames, k)
            assert [n for n, _ in got] == [n for n, _ in decode(metas, frames, k)[0]]
            assert sorted(n for n, _ in got) == sorted(tensors)
            for name, t in got:
                assert t.dtype == tensors[name].dtype and torch.equal(t, tensors[name])


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("case", ["frames", "size"])
def test_the_decoder_refuses_frames_that_do_not_fit_metas_it_knows(case, reuse):
    dec = Decoder(reuse=reuse)
    tensors = {"a": torch.ones(3), "b": torch.ones(2)}
    metas, frames, k = _answer(tensors)
    dec.decode(0, metas, frames, k)
    frames = frames + [b""] if case == "frames" else [frames[0][:-4]]
    with pytest.raises(ServiceError) as err:
        dec.decode(0, metas, frames, k)
    assert err.value.code == "INVALID_ARGUMENT"


def test_a_reusing_decoder_copies_each_message_into_views_kept_per_thread_and_peer():
    dec = Decoder(reuse=True)
    first = {"w": torch.arange(6.0).view(2, 3), "b": torch.ones(3)}
    second = {"w": torch.full((2, 3), 7.0), "b": torch.zeros(3)}
    got1, flat1 = dec.decode("a", *_answer(first))
    views1 = [t for _, t in got1]
    got2, flat2 = dec.decode("a", *_answer(second))
    # the same views, now holding the second message (the first's caller is done with them)
    assert flat2 is flat1 and all(x is y for x, (_, y) in zip(views1, got2))
    assert all(torch.equal(t, second[n]) for n, t in got2)
    # not the frame's memory: a frame is released when its message is answered
    metas, frames, k = _answer(first)
    got3, _ = dec.decode("b", metas, frames, k)
    assert got3[0][1].data_ptr() != torch.frombuffer(frames[0], dtype=torch.float32).data_ptr()
    assert all(x is not y for x, (_, y) in zip(views1, got3))  # another peer's own views
    others = []
    thread = threading.Thread(target=lambda: others.append(dec.decode("a", *_answer(first))))
    thread.start()
    thread.join()
    (got4, flat4), = others
    assert flat4 is not flat2 and all(torch.equal(t, first[n]) for n, t in got4)
    assert all(torch.equal(t, second[n]) for n, t in got2)  # untouched by the other thread


def test_a_reusing_decoder_keeps_a_bounded_number_of_bytes_per_thread(monkeypatch):
    monkeypatch.setattr(frames_module, "KEEP_MAX_BYTES", 16 * 4 * 64)  # 4 KiB: 16 buffers
    dec = Decoder(reuse=True)
    small = {"w": torch.ones(8, 4), "b": torch.ones(32)}  # 256 bytes packed
    for peer in range(40):
        got, flat = dec.decode(peer, *_answer(small))
        assert all(torch.equal(t, small[n]) for n, t in got)
    kept = dec._reuse.kept
    assert 0 < len(kept) <= 16 and dec._reuse.kept_bytes == sum(e[1].nbytes for e in kept.values())
    assert dec._reuse.kept_bytes <= 16 * 4 * 64 and 39 in kept and 0 not in kept
    large = {"w": torch.ones(64, 2), "b": torch.ones(1)}  # 516 bytes: over KEEP_MAX_BYTES / 16
    got, flat = dec.decode("big", *_answer(large))
    assert "big" not in kept and all(torch.equal(t, large[n]) for n, t in got)
