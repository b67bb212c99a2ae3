"""Hand each process the rollout rows it trains on, moving only the rows that another process generated.

Every process generated a contiguous block of `rows_per_process` rows of the global generation batch, and every
process knows (from the gathered rewards) which global rows each process trains on. A row already on the process
that trains it never moves. The others travel point to point with two `all_to_all_single` calls: a header of
lengths (int64) and one byte payload holding, per row, the token ids and masks as int32, the sampling log-probs as
float32 and the row's remaining Python fields (prompt, completion text, input row, images, extra fields) as one
pickle. Whether anything moves depends only on the plan, which every process computes identically, so every
process joins both collectives or none does.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

# Columns packed as raw numbers; every other column travels in the row's pickle.
INT_COLUMNS = ("prompt_ids", "completion_ids", "tool_mask")
FLOAT_COLUMNS = ("logprobs",)
_HEADER = len(INT_COLUMNS) + len(FLOAT_COLUMNS) + 1  # one length per numeric column, plus the pickle's
_ABSENT = -1  # length recorded for a numeric column that is None for the row


def owners(rows: torch.Tensor, rows_per_process: int) -> torch.Tensor:
    """The process that generated each global row."""
    return torch.div(rows, rows_per_process, rounding_mode="floor")


def rows_to_move(plan: torch.Tensor, rows_per_process: int) -> int:
    """How many rows of `plan` ((processes, rows each) global rows to train) are trained away from where they were
    generated."""
    return int((owners(plan, rows_per_process) != torch.arange(len(plan)).unsqueeze(1)).sum())


def take_rows(
    columns: dict[str, Sequence | None],
    plan: torch.Tensor,
    rows_per_process: int,
    process_index: int,
    device: torch.device,
) -> dict[str, list | None]:
    """This process's rows of `plan`, column by column, in the plan's order.

    `columns` holds this process's generated rows (each a list of `rows_per_process` values, or None for a column
    this process does not have); `plan[p]` lists the global rows process p trains on, the same on every process.
    """
    num_processes = len(plan)
    owner = owners(plan, rows_per_process)
    mine, my_owner = plan[process_index].tolist(), owner[process_index].tolist()
    start = process_index * rows_per_process
    received: dict[int, dict] = {}
    if rows_to_move(plan, rows_per_process):
        outgoing = [
            [row - start for row in plan[dst][owner[dst] == process_index].tolist()] if dst != process_index else []
            for dst in range(num_processes)
        ]
        by_sender = [[row for row, o in zip(mine, my_owner, strict=True) if o == src] for src in range(num_processes)]
        by_sender[process_index] = []
        incoming = [row for rows in by_sender for row in rows]
        incoming_counts = [len(rows) for rows in by_sender]
        payloads = [[_encode_row(columns, i) for i in rows] for rows in outgoing]
        decoded = _all_to_all(payloads, incoming_counts, device)
        received = dict(zip(incoming, decoded, strict=True))
    result: dict[str, list | None] = {}
    for name, values in columns.items():
        local = values if values is not None else [None] * rows_per_process
        taken = [received[row].get(name) if row in received else local[row - start] for row in mine]
        # A column can be None on one process and not on another (TRL drops `images` where no row has one).
        result[name] = None if values is None and all(value is None for value in taken) else taken
    return result


def _encode_row(columns: dict[str, Sequence | None], index: int) -> tuple[list[int], bytes]:
    lengths, chunks = [], []
    for name, dtype in [*((c, np.int32) for c in INT_COLUMNS), *((c, np.float32) for c in FLOAT_COLUMNS)]:
        values = columns.get(name)
        if values is None or values[index] is None:
            lengths.append(_ABSENT)
            continue
        row = values[index]
        if dtype is np.float32:
            row = [np.nan if x is None else x for x in row]
        data = np.asarray(row, dtype=dtype).tobytes()
        lengths.append(len(data))
        chunks.append(data)
    others = {name: values[index] for name, values in columns.items() if _is_object_column(name, values)}
    data = pickle.dumps(others, protocol=pickle.HIGHEST_PROTOCOL)
    lengths.append(len(data))
    chunks.append(data)
    return lengths, b"".join(chunks)


def _decode_row(lengths: list[int], data: bytes) -> dict:
    row, offset = {}, 0
    for name, dtype, length in zip(
        (*INT_COLUMNS, *FLOAT_COLUMNS),
        (*(np.int32,) * len(INT_COLUMNS), *(np.float32,) * len(FLOAT_COLUMNS)),
        lengths[:-1],
        strict=True,
    ):
        if length == _ABSENT:
            row[name] = None
            continue
        row[name] = np.frombuffer(data, dtype=dtype, count=length // np.dtype(dtype).itemsize, offset=offset).tolist()
        offset += length
    row.update(pickle.loads(data[offset : offset + lengths[-1]]))
    return row


def _is_object_column(name: str, values: Sequence | None) -> bool:
    return values is not None and name not in INT_COLUMNS and name not in FLOAT_COLUMNS


def _all_to_all(
    payloads: list[list[tuple[list[int], bytes]]], incoming_counts: list[int], device: torch.device
) -> list[dict]:
    """Send `payloads[p]` (encoded rows) to each process p; return the rows received, ordered by sender."""
    send_header = torch.tensor(
        [lengths for rows in payloads for lengths, _ in rows], dtype=torch.int64, device=device
    ).view(-1, _HEADER)
    recv_header = torch.empty((sum(incoming_counts), _HEADER), dtype=torch.int64, device=device)
    dist.all_to_all_single(
        recv_header,
        send_header,
        output_split_sizes=incoming_counts,  # in rows of the header
        input_split_sizes=[len(rows) for rows in payloads],
    )
    send_bytes = [b"".join(data for _, data in rows) for rows in payloads]
    packed = b"".join(send_bytes)
    send = torch.frombuffer(bytearray(packed or b"\0"), dtype=torch.uint8)[: len(packed)]  # frombuffer refuses b""
    headers = recv_header.cpu().tolist()
    row_sizes = [sum(max(x, 0) for x in lengths) for lengths in headers]
    incoming_sizes, cursor = [], 0
    for count in incoming_counts:
        incoming_sizes.append(sum(row_sizes[cursor : cursor + count]))
        cursor += count
    recv = torch.empty(sum(incoming_sizes), dtype=torch.uint8, device=device)
    dist.all_to_all_single(
        recv, send.to(device), output_split_sizes=incoming_sizes, input_split_sizes=[len(b) for b in send_bytes]
    )
    data = recv.cpu().numpy().tobytes()
    rows, offset = [], 0
    for lengths, size in zip(headers, row_sizes, strict=True):
        rows.append(_decode_row(lengths, data[offset : offset + size]))
        offset += size
    return rows
