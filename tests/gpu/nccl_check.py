"""Every algorithm on CUDA tensors over NCCL, against ``dist.all_reduce``.

Run by tests/test_torch_distributed.py (marked ``gpu``) as
``torchrun --nproc-per-node G tests/gpu/nccl_check.py`` with one process per GPU.  Exits
non-zero, naming the case, on the first wrong result."""

import os
import sys

import torch
import torch.distributed as dist

import allreduce
from allreduce.testing import exact_input, first_difference

OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local_rank % torch.cuda.device_count())
dist.init_process_group("nccl")
rank, size = dist.get_rank(), dist.get_world_size()
failures = []
for algorithm in allreduce.ALGORITHMS:
    for op in allreduce.OP_NAMES:
        for dtype in allreduce.DTYPES:
            if op == "mean" and dtype.startswith("int"):
                continue
            for count in (0, 1, 3, 1000, 1_000_003):
                x = torch.from_numpy(exact_input(rank, count, dtype, op)).cuda()
                expected = x.clone()
                dist.all_reduce(expected, op=OPS[op])
                if op == "mean":
                    expected /= size
                result = allreduce.allreduce(x, dist.group.WORLD, algorithm=algorithm, op=op)
                if not result.is_cuda:
                    failures.append(f"{algorithm} {op} {dtype} {count}: result left the GPU")
                wrong = first_difference(expected.cpu().numpy(), result.cpu().numpy())
                if wrong:
                    failures.append(f"{algorithm} {op} {dtype} {count}: {wrong}")
print(f"rank {rank}/{size}: {len(failures)} failures", *failures[:5], sep="\n", flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
