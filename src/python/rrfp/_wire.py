"""Tensors of any dtype, each with a picklable label, in one uint8 CPU tensor: what the job's
byte all-gathers carry between processes (the gradients of a tie's copies, the data-parallel
sums), bit for bit."""
import pickle
import struct

import torch

_ALIGN = 8  # every tensor's bytes start at a multiple of this, so they view as any dtype


def pack(entries):
    """entries: (label, tensor or None) -> one uint8 CPU tensor."""
    header, data, at = [], [], 0
    for label, t in entries:
        if t is None:
            header.append((label, None, None, 0))
            continue
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        header.append((label, str(t.dtype), tuple(t.shape), at))
        pad = -raw.numel() % _ALIGN
        data += [raw] + ([torch.zeros(pad, dtype=torch.uint8)] if pad else [])
        at += raw.numel() + pad
    head = pickle.dumps(header)
    head += bytes(-(len(head) + 8) % _ALIGN)
    start = torch.frombuffer(bytearray(struct.pack("<Q", len(head)) + head), dtype=torch.uint8)
    return torch.cat([start] + data)


def unpack(buf):
    """pack's entries back, (label, tensor or None), the tensors views of `buf`."""
    (n,) = struct.unpack("<Q", buf[:8].numpy().tobytes())
    header = pickle.loads(buf[8:8 + n].numpy().tobytes())
    body = buf[8 + n:]
    out = []
    for label, dtype, shape, at in header:
        t = None
        if dtype is not None:
            dtype = getattr(torch, dtype.split(".")[-1])
            size = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            t = body[at:at + size].view(dtype).view(shape)
        out.append((label, t))
    return out
