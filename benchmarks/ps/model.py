"""The benchmark's model: its tensor shapes and sizes, and the constants every system shares."""
from __future__ import annotations

CHUNK = 1 << 20  # grpc-raw streams 1 MiB chunks
LR = 1e-9


def model_shapes(params: int) -> list[tuple[str, tuple[int, ...]]]:
    """4 square-ish weight matrices and 4 biases, `params` elements in all (about)."""
    per = params // 4
    side = int(per ** 0.5)
    shapes = []
    for i in range(4):
        rows = side
        cols = (per - side) // side
        shapes.append((f"layer{i}.weight", (rows, cols)))
        shapes.append((f"layer{i}.bias", (side,)))
    return shapes


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def parse_size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 10**3, "M": 10**6}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * mult)

