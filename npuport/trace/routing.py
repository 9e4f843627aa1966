"""Mixture-of-experts code that reads its routing on the host, traced with the tokens spread evenly over the experts.

Many MoE implementations count the tokens each expert receives and read the counts back to split the batch:
- `expert_size = one_hot.sum(0).tolist()` then `x.split(expert_size)` (JetMoE);
- `torch.bincount(topk_idx.flatten(), minlength=E).tolist()` then `torch.where(topk_idx == i)` per expert
  (DeepSeek-V3's own inference model.py and many training repositories);
- `cnts.scatter_(1, topk_ids, 1).sum(0).cpu().numpy()` then a slice per expert (DeepSeek's modeling code on the Hub);
- `torch.histc(topk_idx.float(), bins=E, min=0, max=E).tolist()` then `x.split(counts)`;
- `one_hot(topk_idx, E).permute(2, 1, 0)`, then `torch.where(expert_mask[i])` per expert, or only for the experts
  `(expert_mask.sum(dim=(-1, -2)) > 0).nonzero()` lists (the loop of transformers 4.x Mixtral-style code);
- `m = topk_idx == i` then `y[m] = expert(x[m])` per expert (a boolean mask as the index).
On fake tensors these values do not exist, so such a model cannot be traced as it is.

`balanced_routing()` answers exactly those reads, and only when the tensor read is known to be routing: it follows,
by the aten ops that made them, the expert indices of a top-k over E scores and what is made from them (one-hot
matrices, per-expert counts, masks per expert). A count of T routed (token, expert) pairs over E experts is taken as
T // E per expert (the first T % E one more): the load a router trained with a load-balancing loss aims at, with the
FLOPs a real step has (they depend on T only). Any other read of a value still fails as before. The audit uses it
only after a scenario failed on such a read, and says so in its notes.

One read that is not routing is answered in the same pass: an assertion over tensor values (`torch._check_tensor_all`,
which transformers' `torch_compilable_check` calls outside torch.compile; ProphetNet checks its position ids with it
on every decode step) reads `cond._is_all_true()` on the host only to raise on a broken input. It is taken as holding
(the inputs the audit makes are well formed), counted apart (`asserted`), and the audit notes it: on a device that
read is a host synchronisation on every call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten


@dataclass(frozen=True)
class _Zeros:
    pass


@dataclass(frozen=True)
class _Arange:  # 0, 1, ..., n - 1
    n: int


@dataclass(frozen=True)
class _Indices:  # values in [0, experts): which expert each (token, slot) goes to
    experts: int


@dataclass(frozen=True)
class _OneHot:  # last dim = experts, `per_row` ones in each row along it, zeros elsewhere
    experts: int
    per_row: int


@dataclass(frozen=True)
class _Counts:  # 1-D, one count per expert, `total` routed pairs in all
    experts: int
    total: int


@dataclass(frozen=True)
class _Value:  # a 0-d tensor holding one known integer
    value: int


@dataclass(frozen=True)
class _Holds:  # the 0-d result of `_is_all_true`, read only by an assertion
    pass


@dataclass(frozen=True)
class _Mask:  # `indices == expert`: `count` true elements
    count: int


@dataclass(frozen=True)
class _ExpertMajor:  # a one-hot permuted so that the expert axis is first: slice i holds expert i's count of ones
    experts: int
    total: int


@dataclass(frozen=True)
class _Positive:  # `counts > 0`: the experts that received tokens
    experts: tuple[int, ...]


@dataclass(frozen=True)
class _ExpertRows:  # the nonzero of `counts > 0`: one row per expert that received tokens, its index as the value
    experts: tuple[int, ...]


def balanced(total: int, experts: int) -> list[int]:
    """`total` routed pairs over `experts`, as evenly as integers allow."""
    q, r = divmod(total, experts)
    return [q + (1 if i < r else 0) for i in range(experts)]


# ops that carry a tensor's routing meaning to their output unchanged (casts, copies, reshapes, device moves)
_SAME = {aten._to_copy.default, aten.clone.default, aten.contiguous.default, aten.alias.default, aten.detach.default,
         aten.lift_fresh.default, aten._unsafe_view.default, aten.view.default, aten.reshape.default,
         aten.flatten.using_ints, aten.view.dtype, aten.squeeze.dim, aten.squeeze.default, aten.squeeze.dims,
         aten.unsqueeze.default}
_ZEROS = {aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default}


class BalancedRouting(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.marks: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.answered = 0  # reads answered: a run that needed none says nothing in its notes
        self.asserted = 0  # value assertions taken as holding (see the module's docstring)

    def _mark(self, t: Any) -> Any:
        return self.marks.get(t) if isinstance(t, torch.Tensor) else None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args else None
        mark = self._mark(first)
        if isinstance(mark, _Holds) and func in (aten._local_scalar_dense.default, aten.item.default):
            self.asserted += 1
            return True
        made = self._answer(func, first, mark, args, kwargs)
        if made is not None:
            self.answered += 1
            return made
        out = func(*args, **kwargs)
        self._follow(func, out, first, mark, args, kwargs)
        return out

    # -- reads that need values ------------------------------------------------------------------------------------
    def _answer(self, func: Any, first: Any, mark: Any, args: tuple, kwargs: dict) -> Any:
        if func in (aten._local_scalar_dense.default, aten.item.default) and isinstance(mark, _Value):
            return float(mark.value) if first.is_floating_point() else mark.value
        if func is aten.nonzero.default and isinstance(mark, _Mask):
            return torch.empty((mark.count, first.dim()), dtype=torch.long, device=first.device)
        if func is aten.where.default and isinstance(mark, _Mask):  # torch.where(mask) as inference mode runs it
            return tuple(torch.empty((mark.count,), dtype=torch.long, device=first.device) for _ in range(first.dim()))
        if func is aten.index.Tensor and any(isinstance(self._mark(i), _Mask) and i.dtype == torch.bool
                                             for i in args[1] if i is not None):
            return func(first, self._mask_as_positions(args[1]))  # x[idx == i]: the mask's rows, counted balanced
        if func is aten.nonzero.default and isinstance(mark, _Positive) and first.dim() == 1:
            out = torch.empty((len(mark.experts), 1), dtype=torch.long, device=first.device)
            self.marks[out] = _ExpertRows(mark.experts)
            return out
        if func is aten.repeat_interleave.Tensor and isinstance(mark, _Counts) and first.dim() == 1 and \
                kwargs.get("output_size", args[1] if len(args) > 1 else None) is None:
            # arange(E).repeat_interleave(counts): each routed pair's expert, sorted (values in [0, experts))
            out = torch.empty((mark.total,), dtype=torch.long, device=first.device)
            self.marks[out] = _Indices(mark.experts)
            return out
        if func is aten.bincount.default and isinstance(mark, _Indices) and kwargs.get("weights", args[1] if len(args) > 1 else None) is None:
            minlength = kwargs.get("minlength", args[2] if len(args) > 2 else 0)
            experts = max(mark.experts, int(minlength))
            out = torch.empty((experts,), dtype=torch.long, device=first.device)
            self.marks[out] = _Counts(experts, first.numel())
            return out
        return None

    def _mask_as_positions(self, indices: list) -> list:
        """An expert's boolean mask as an index stands for the positions of its true elements (one long index per
        mask dimension, `count` long): what indexing by it selects."""
        out: list = []
        for i in indices:
            mark = self._mark(i)
            if isinstance(mark, _Mask) and i.dtype == torch.bool:
                out.extend(torch.empty((mark.count,), dtype=torch.long, device=i.device) for _ in range(i.dim()))
            else:
                out.append(i)
        return out

    # -- following the routing through the ops that make it -------------------------------------------------------
    def _follow(self, func: Any, out: Any, first: Any, mark: Any, args: tuple, kwargs: dict) -> None:
        if func in _ZEROS or func is aten.full.default and args[1] == 0 or func is aten.fill_.Scalar and args[1] == 0:
            if isinstance(out, torch.Tensor):
                self.marks[out] = _Zeros()
            return
        if func is aten._is_all_true.default:
            self.marks[out] = _Holds()
            return
        if func is aten.arange.default and isinstance(args[0], int):
            self.marks[out] = _Arange(args[0])
            return
        if func is aten.topk.default and isinstance(out, tuple) and first.dim() > 0:
            dim = kwargs.get("dim", args[2] if len(args) > 2 else -1)
            self.marks[out[1]] = _Indices(first.shape[dim])
            return
        if mark is None:
            return
        if func is aten.index_select.default and isinstance(mark, _Arange) and args[1] == 0 and \
                isinstance(self._mark(args[2]), _Indices):  # arange(E)[experts]: the experts themselves
            self.marks[out] = self._mark(args[2])
            return
        if func in _SAME and isinstance(out, torch.Tensor):
            if isinstance(mark, (_Indices, _Counts, _Zeros, _Mask, _Value)) or \
                    isinstance(mark, _OneHot) and out.dim() and out.shape[-1] == mark.experts:
                self.marks[out] = mark
            return
        if func is aten.permute.default and isinstance(mark, _OneHot) and args[1][0] % first.dim() == first.dim() - 1:
            self.marks[out] = _ExpertMajor(mark.experts, first.numel() // mark.experts * mark.per_row)
            return
        if isinstance(mark, _ExpertMajor):  # expert_mask[i], expert_mask[expert_idx], expert_mask.sum(dim=(-1, -2))
            values = balanced(mark.total, mark.experts)
            picked = self._mark(args[1][0]) if func is aten.index.Tensor and len(args[1]) == 1 else None
            if func is aten.select.int and args[1] == 0:
                self.marks[out] = _Mask(values[args[2]])
            elif isinstance(picked, _Value) and args[1][0].numel() == 1:
                self.marks[out] = _Mask(values[picked.value])
            elif func is aten.sum.dim_IntList and out.dim() == 1 and out.shape[0] == mark.experts:
                self.marks[out] = _Counts(mark.experts, mark.total)
            return
        if func in (aten.gt.Scalar, aten.ne.Scalar) and isinstance(mark, _Counts) and args[1] == 0:
            self.marks[out] = _Positive(tuple(i for i, v in enumerate(balanced(mark.total, mark.experts)) if v > 0))
            return
        if isinstance(mark, _ExpertRows):  # `for expert_idx in expert_hit`: each row's value is its expert
            if func is aten.unbind.int and len(out) == len(mark.experts):
                for t, v in zip(out, mark.experts):
                    self.marks[t] = _Value(v)
            elif func is aten.select.int and args[1] == 0:
                self.marks[out] = _Value(mark.experts[args[2]])
            return
        if func in (aten.scatter.value, aten.scatter_.value) and isinstance(mark, _Zeros) and args[3] == 1:
            dim, index = args[1], args[2]  # ones at a top-k's expert indices: not any one-hot (labels are not routing)
            if dim % first.dim() == first.dim() - 1 and index.dim() == first.dim() and \
                    isinstance(self._mark(index), _Indices):
                self.marks[out] = _OneHot(first.shape[-1], index.shape[-1])
            return
        if func is aten.eq.Tensor and isinstance(mark, _Indices) and isinstance(self._mark(args[1]), _Arange) and \
                args[1].dim() == 1 and args[1].shape[0] == mark.experts and out.shape[-1] == mark.experts and \
                first.shape[-1] == 1:  # one_hot as fake tensors decompose it: indices.unsqueeze(-1) == arange(E)
            self.marks[out] = _OneHot(mark.experts, 1)
            return
        if func is aten.one_hot.default and isinstance(mark, _Indices):
            self.marks[out] = _OneHot(out.shape[-1], 1)
            return
        if func is aten.sum.dim_IntList and isinstance(mark, _OneHot) and out.dim() == 1 and out.shape[0] == mark.experts:
            self.marks[out] = _Counts(mark.experts, first.numel() // mark.experts * mark.per_row)
            return
        if func is aten.histc.default and isinstance(mark, _Indices):
            bins, low, high = (list(args[1:4]) + [100, 0, 0][len(args) - 1:])[:3]
            if bins == mark.experts and low == 0 and high in (mark.experts - 1, mark.experts):  # one bin per expert
                self.marks[out] = _Counts(mark.experts, first.numel())
            return
        if func in (aten.any.dim, aten.any.dims) and isinstance(mark, _Mask) and first.dim() > 1 and \
                _last_dim(args, first.dim()):  # (indices == i).any(-1): top-k picks distinct experts, so a row
            self.marks[out] = mark  # holds expert i at most once and as many rows are true as elements were
            return
        if func is aten.eq.Scalar and isinstance(mark, _Indices) and isinstance(args[1], int):
            self.marks[out] = _Mask(balanced(first.numel(), mark.experts)[args[1]] if 0 <= args[1] < mark.experts else 0)
            return
        if isinstance(mark, _Counts) and first.dim() == 1:
            values = balanced(mark.total, mark.experts)
            if func is aten.unbind.int and len(out) == len(values):
                for t, v in zip(out, values):
                    self.marks[t] = _Value(v)
            elif func is aten.select.int and args[1] in (0, -1):
                self.marks[out] = _Value(values[args[2]])


def _last_dim(args: tuple, ndim: int) -> bool:
    """Whether an `any` reduces the last dimension alone (any.dim's int, any.dims' one-element list)."""
    dim = args[1] if len(args) > 1 else None
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return len(dims) == 1 and isinstance(dims[0], int) and dims[0] % ndim == ndim - 1


class _NumpyReads(TorchFunctionMode):
    """`counts.cpu().numpy()` (DeepSeek's own modeling code on the Hub): `numpy()` is no aten op, so it is answered
    here, from the marks the dispatch mode keeps."""

    def __init__(self, routing: BalancedRouting) -> None:
        super().__init__()
        self.routing = routing

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.Tensor.numpy and args:
            mark = self.routing._mark(args[0])
            if isinstance(mark, _Counts) and args[0].dim() == 1:
                import numpy  # noqa: PLC0415 - only code that calls .numpy() needs it, and then it is installed

                self.routing.answered += 1
                dtype = numpy.float32 if args[0].is_floating_point() else numpy.int64
                return numpy.array(balanced(mark.total, mark.experts), dtype=dtype)
        return func(*args, **(kwargs or {}))


NUMPY_READ = ".numpy() is not supported for tensor subclasses"  # what torch says for a fake tensor's .numpy()


@contextlib.contextmanager
def balanced_routing() -> Iterator[BalancedRouting]:
    """Inside an active FakeTensorMode: routing reads answered as described above."""
    with BalancedRouting() as mode, _NumpyReads(mode):
        yield mode
