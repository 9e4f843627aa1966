"""Find CUDA-specific references in one Python source file by AST (never executing it), each with the
mechanical edit that ports it when there is one.

Names are resolved through the file's imports (`import torch as th`, `from torch.cuda import amp`), so
`th.cuda.synchronize` and `amp.autocast` are recognised. A device string is only treated as a device when it
sits in a device position: a device/device_type/map_location keyword, the first argument of `.to()`,
`torch.device()` or `torch.autocast()`, or a value bound to a name containing "device". Everything else that
mentions "cuda" (a comparison, an f-string) is reported for a hand change, never rewritten.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterator, cast

from npuport.coverage.hccl import hccl_env, map_backend
from npuport.scan.source_apis import SourceApis, load_source_apis

_CUDA_STR = re.compile(r"^cuda(:\d+)?$")
_CUDA_LIT = re.compile(r"^([rRuU]?)(['\"])cuda(:\d+)?\2$")
_NCCL_LIT = re.compile(r"^([rRuU]?)(['\"])nccl\2$")
# device-prefixed backend strings: "cuda:nccl,cpu:gloo"
_PREFIXED_BACKEND = re.compile(r"^(\w+:\w+)(,\w+:\w+)*$")
_PREFIXED_LIT = re.compile(r"^([rRuU]?)(['\"])((?:\w+:\w+)(?:,\w+:\w+)*)\2$")


def _npu_backend(value: str) -> str:
    """"cuda:nccl,cpu:gloo" -> "npu:hccl,cpu:gloo": the device-prefixed parts that name nccl, spelled as
    mappings/hccl.yaml maps backend strings (the audit's HCCL lookups read the same table)."""
    return ",".join(map_backend(part).target if part == "cuda:nccl" else part for part in value.split(","))
# import diagnostics whose modules are CUDA builds: their uses are references too (not triton's NPS062, an info)
_COMPILED_IMPORT_IDS = frozenset({"NPS070", "NPS071", "NPS072", "NPS073", "NPS074", "NPS075", "NPS076"})
# torch.cuda functions whose first argument is a device (torch.cuda.get_device_properties(device), ...)
_CUDA_DEVICE_ARG = frozenset({"set_device", "get_device_properties", "get_device_name", "get_device_capability",
                              "synchronize", "memory_allocated", "max_memory_allocated", "memory_reserved",
                              "max_memory_reserved", "reset_peak_memory_stats", "mem_get_info", "device", "stream",
                              "current_stream", "default_stream", "empty_cache", "memory_stats", "utilization"})
# NVIDIA command-line tools a script may run, and the Ascend counterpart
_NVIDIA_TOOLS = {"nvidia-smi": "npu-smi info", "nvcc": "none (Ascend C kernels build with CANN's toolchain)", "nsys": "msprof"}
_DEVICE_KW = {"device", "device_type", "map_location", "output_device", "device_map"}
_AUTO_METHODS = {"to", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "pin_memory", "to_empty"}
_DEVICE_FIRST_ARG = {"torch.device": False, "torch.autocast": False, "torch.amp.autocast": False,
                     "torch.amp.GradScaler": False, "torch.Generator": False}


@dataclass(frozen=True)
class Edit:
    start: int  # character offsets into the source text
    end: int
    text: str


@dataclass
class Ref:
    id: str
    line: int
    col: int  # 1-based, in characters
    detail: str
    edits: tuple[Edit, ...] = ()
    auto: bool | None = None  # None: the diagnostic's default
    via_import: bool = False  # ported by rewriting the `from torch.cuda... import` that bound the name
    # Device and backend strings are rewritten as a group or not at all (npuport.scan.migrate decides per program):
    # "device" for "cuda" strings, "backend" for "nccl". A blocker is a string of the group whose role the AST
    # does not show (a message, a dict value): its presence keeps the whole group unchanged.
    group: str = ""
    blocker: bool = False

    @property
    def migrated(self) -> bool:
        return bool(self.edits) or self.via_import


class _Positions:
    """AST positions (line, UTF-8 byte column) to character offsets in the text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def char_col(self, line: int, byte_col: int) -> int:
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(src.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def offset(self, line: int, byte_col: int) -> int:
        return self.starts[line - 1] + self.char_col(line, byte_col)

    def span(self, node: ast.expr | ast.stmt) -> tuple[int, int]:
        # end positions are None only on nodes built by hand, never on parsed ones
        return self.offset(node.lineno, node.col_offset), self.offset(cast(int, node.end_lineno), cast(int, node.end_col_offset))


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    out: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _aliases(tree: ast.AST) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.ImportFrom) and node.level:  # `from .rmsnorm import FusedRMSNorm`
            for a in node.names:
                if a.name != "*":
                    names.setdefault(a.asname or a.name, f"{node.module}.{a.name}" if node.module else a.name)
    return names


def _target_names(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _target_names(elt)


class Finder:
    """Walks one module's AST and collects `Ref`s."""

    def __init__(self, text: str, tree: ast.Module, apis: SourceApis | None = None,
                 cuda_modules: dict[str, str] | None = None) -> None:
        self.text, self.tree = text, tree
        # local modules of the same program that hold CUDA-only code: {module name: what they hold}
        self.cuda_modules = cuda_modules or {}
        self.apis = apis or load_source_apis()
        self.pos = _Positions(text)
        self.parent = _parents(tree)
        self.alias = _aliases(tree)
        self.refs: list[Ref] = []
        self.migrated_aliases: set[str] = set()  # names bound by a `from torch.cuda... import` that migrate rewrites
        self._local_cache: dict[int, frozenset[str]] = {}
        self._propagated: set[str] = set()
        self._propagate_aliases()
        self._import_edits = self._find_import_edits()

    # ------------------------------------------------------------ helpers
    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            if node.id in self.alias and node.id != "torch" and self._shadowed(node):
                return None  # a parameter or local of the enclosing function, not the module-level import
            return self.alias.get(node.id, node.id if node.id == "torch" else None)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _propagate_aliases(self) -> None:
        """`Opt = DeepSpeedCPUAdam if offload else FusedAdam`, `mlp = FusedLinearReLUSquare.apply`,
        `fa = get_kernel("...")`: the assigned name stands for what its source names, so its uses are found.
        Only names, attributes, conditional choices, and calls that hand back CUDA-only code (a Hub kernel, a
        compiled extension) propagate; `model = torch.compile(model)` does not."""
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            target = node.targets[0].id
            if target in self.alias:
                continue
            value = node.value
            options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else (
                value.values if isinstance(value, ast.BoolOp) else [value])
            for opt in options:
                dotted = None
                if isinstance(opt, ast.Name) or (isinstance(opt, ast.Attribute) and self.dotted(opt)):
                    dotted = self.dotted(opt) if not isinstance(opt, ast.Name) else self.alias.get(opt.id)
                else:
                    base = opt
                    while isinstance(base, ast.Attribute):  # get_kernel("...").flash_attn_interface
                        base = base.value
                    if isinstance(base, ast.Call):
                        callee = self.dotted(base.func)
                        if callee and self._hands_back_cuda_code(callee):
                            dotted = callee
                if dotted and dotted != "torch":
                    self.alias[target] = dotted
                    self._propagated.add(target)  # bound locally on purpose: never "shadowed"
                    break

    def _hands_back_cuda_code(self, dotted: str) -> bool:
        """Calls whose result is CUDA code: a Hub kernel (get_kernel) or a JIT-built extension (cpp_extension.load).
        An instance of a class (`model = GPT(config)`) is not."""
        ids = {did for key, did in self.apis.torch_apis.items() if dotted == key}  # the factory itself, not its results' calls
        return bool(ids & {"NPS060", "NPS092"})

    def _shadowed(self, node: ast.Name) -> bool:
        """The name is bound inside an enclosing function (parameter, assignment, for target, import):
        `def __init__(self, config): config.n_embd` is not the module's `import torch._inductor.config as config`."""
        if node.id in self._propagated:
            return False
        p = self.parent.get(id(node))
        while p is not None:
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if node.id in self._locals(p):
                    return True
            p = self.parent.get(id(p))
        return False

    def _locals(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> frozenset[str]:
        got = self._local_cache.get(id(fn))
        if got is None:
            a = fn.args
            names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
            names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
            body = fn.body if isinstance(fn.body, list) else [fn.body]
            for stmt in body:
                for n in ast.walk(stmt):
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)) and n is not stmt:
                        pass  # nested scopes bind their own names; walking into them only over-approximates
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        names.add(n.id)
                    # a local `from flash_attn import flash_attn_func` binds the import itself: not a shadow
                    elif isinstance(n, (ast.Global, ast.Nonlocal)):
                        names -= set(n.names)
            got = frozenset(names)
            self._local_cache[id(fn)] = got
        return got

    def add(self, did: str, node: ast.AST, detail: str, edits: tuple[Edit, ...] = (), auto: bool | None = None) -> None:
        line = getattr(node, "lineno", 1)
        col = self.pos.char_col(line, getattr(node, "col_offset", 0)) + 1
        if isinstance(node, ast.Attribute) and node.end_lineno != node.lineno:  # `GPT(\n ...\n).cuda()`: the token's line
            line = cast(int, node.end_lineno)  # parsed nodes always carry their end position
            col = self.pos.char_col(line, cast(int, node.end_col_offset)) + 1 - len(node.attr)
        self.refs.append(Ref(did, line, col, detail, edits, auto))

    def _attr_token(self, node: ast.Attribute, new: str) -> Edit | None:
        end = self.pos.offset(cast(int, node.end_lineno), cast(int, node.end_col_offset))
        start = end - len(node.attr)
        if self.text[start:end] != node.attr:
            return None
        return Edit(start, end, new)

    def _literal(self, node: ast.Constant, pattern: re.Pattern[str], new: str) -> Edit | None:
        start, end = self.pos.span(node)
        m = pattern.match(self.text[start:end])
        if not m:
            return None  # implicit concatenation, escapes: leave it to a person
        suffix = m.group(3) if m.re.groups >= 3 and m.group(3) else ""
        return Edit(start, end, f"{m.group(1)}{m.group(2)}{new}{suffix}{m.group(2)}")

    # ------------------------------------------------------------ torch.cuda.*
    def _cuda_api(self, node: ast.AST, dotted: str) -> None:
        parts = dotted.split(".")
        name = parts[2] if len(parts) > 2 else ""
        apis = self.apis
        did = apis.groups.get(name)
        if did is None:
            if name in apis.no_equivalent:
                self.add("NPS002", node, f"{dotted}: {apis.no_equivalent[name]}")
                return
            did = "NPS001" if (name in apis.npu_names or not name) else None
        if did is None:
            self.add("NPS002", node, f"{dotted} is not in torch.npu")
            return
        renamed = apis.renamed.get(name, name)
        npu = "torch.npu" + (f".{renamed}" if name else "") + "".join(f".{p}" for p in parts[3:])
        edits: tuple[Edit, ...] = ()
        if apis.diagnostics[did].migrate and renamed is not None and self._fields_filled_on_npu(node, name):
            edits = self._cuda_edits(node, name, renamed)
        self.add(did, node, f"{dotted} -> {npu}" if renamed is not None else dotted, edits)
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not edits and isinstance(root, ast.Name) and root.id in self.migrated_aliases and apis.diagnostics[did].migrate:
            self.refs[-1].via_import = True

    def _fields_filled_on_npu(self, node: ast.AST, name: str) -> bool:
        """`get_device_properties(i).<field>` ports only for the fields torch_npu fills (mappings/source_apis.yaml
        npu_device_properties); reading another one (multi_processor_count, major) fails on NPU, so the call is
        left for a person. A properties object kept in a variable is rewritten and still listed (NPS051 warns)."""
        if name != "get_device_properties":
            return True
        call = self.parent.get(id(node))
        field = self.parent.get(id(call)) if isinstance(call, ast.Call) and call.func is node else None
        if isinstance(field, ast.Attribute):
            return field.attr in self.apis.npu_device_properties
        return True

    def _cuda_edits(self, node: ast.AST, name: str, renamed: str) -> tuple[Edit, ...]:
        """Edits on the literal `<torch>.cuda[.name]` chain; () when the chain goes through an alias."""
        chain: list[ast.Attribute] = []
        cur = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur)
            cur = cur.value
        if not isinstance(cur, ast.Name) or self.alias.get(cur.id, cur.id) != "torch" or not chain:
            return ()
        chain.reverse()  # torch.cuda, torch.cuda.name, ...
        if chain[0].attr != "cuda":
            return ()
        edits = [self._attr_token(chain[0], "npu")]
        if renamed != name and len(chain) > 1:
            edits.append(self._attr_token(chain[1], renamed))
        return tuple(e for e in edits if e is not None) if all(edits) else ()

    def _torch_api(self, node: ast.AST, dotted: str) -> bool:
        best = None
        for key, did in self.apis.torch_apis.items():
            if (dotted == key or dotted.startswith(key + ".")) and (best is None or len(key) > len(best[0])):
                best = (key, did)
        if best is None:
            return False
        self.add(best[1], node, dotted)
        return True

    def _reference(self, node: ast.AST, dotted: str | None) -> None:
        if not dotted:
            return
        if dotted == "torch.cuda" or dotted.startswith("torch.cuda."):
            self._cuda_api(node, dotted)
        elif not self._torch_api(node, dotted):
            self._extension_use(node, dotted)

    def _extension_use(self, node: ast.AST, dotted: str) -> None:
        """A use of a name that a CUDA-only module provides (`FusedAdam(...)`, `rotary_emb.apply_rotary(...)`):
        the import is not the only line a port has to change."""
        mod = self._cuda_module(dotted)
        if mod is not None:
            self.add("NPS077", node, f"{dotted}: {self.cuda_modules[mod]}")
            return
        for key, did in self.apis.imports.items():
            if (dotted == key or dotted.startswith(key + ".")) and did in _COMPILED_IMPORT_IDS:
                self.add(did, node, f"use of {dotted}")
                return

    # ------------------------------------------------------------ strings
    def _device_position(self, node: ast.AST) -> tuple[bool, bool]:
        """(is a device position, transfer_to_npu rewrites it at run time)."""
        child, p = node, self.parent.get(id(node))
        while isinstance(p, (ast.IfExp, ast.BoolOp)) and not (isinstance(p, ast.IfExp) and p.test is child):
            child, p = p, self.parent.get(id(p))
        if isinstance(p, ast.keyword) and p.arg in _DEVICE_KW:
            call = self.parent.get(id(p))
            callee = self.dotted(call.func) if isinstance(call, ast.Call) else None
            method = call.func.attr if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) else ""
            return True, bool(callee and callee.startswith("torch.")) or method in _AUTO_METHODS
        if isinstance(p, ast.Call) and p.args and p.args[0] is child:
            if isinstance(p.func, ast.Attribute) and p.func.attr == "to":
                return True, True
            callee = self.dotted(p.func)
            if callee in _DEVICE_FIRST_ARG:
                return True, _DEVICE_FIRST_ARG[callee]
            if callee and callee.startswith("torch.cuda.") and callee.split(".")[2] in _CUDA_DEVICE_ARG:
                return True, True  # torch.cuda.get_device_properties("cuda"): the argument is a device
        if isinstance(p, (ast.Assign, ast.AnnAssign)) and p.value is child:
            targets = p.targets if isinstance(p, ast.Assign) else [p.target]
            if any("device" in n.lower() for t in targets for n in _target_names(t)):
                return True, False
        if isinstance(p, ast.arguments):
            args = p.posonlyargs + p.args
            pairs = list(zip(args[len(args) - len(p.defaults):], p.defaults)) + list(zip(p.kwonlyargs, p.kw_defaults))
            if any(d is child and "device" in a.arg.lower() for a, d in pairs):
                return True, False
        if isinstance(p, ast.Dict):
            for k, v in zip(p.keys, p.values):
                if v is child and isinstance(k, ast.Constant) and isinstance(k.value, str) and "device" in k.value.lower():
                    return True, False
        return False, False

    def _backend_position(self, node: ast.AST) -> tuple[bool, bool]:
        p = self.parent.get(id(node))
        if isinstance(p, ast.keyword) and p.arg == "backend":
            call = self.parent.get(id(p))
            callee = self.dotted(call.func) or "" if isinstance(call, ast.Call) else ""
            return True, callee.endswith(("init_process_group", "new_group"))
        if isinstance(p, ast.Call) and p.args and p.args[0] is node:
            callee = self.dotted(p.func) or (p.func.attr if isinstance(p.func, ast.Attribute) else cast(str, getattr(p.func, "id", "")))
            if callee.endswith(("init_process_group", "new_group")):
                return True, True
        if isinstance(p, (ast.Assign, ast.AnnAssign)) and p.value is node:
            targets = p.targets if isinstance(p, ast.Assign) else [p.target]
            if any("backend" in n.lower() for t in targets for n in _target_names(t)):
                return True, False
        return False, False

    def _test_position(self, node: ast.AST) -> bool:
        """A value the program tests a device / backend string against: `x == "cuda"`, `"cuda" in device`,
        `device in ("cuda", "mps")`, `device.startswith("cuda")`, or a key of a dict indexed by one."""
        p = self.parent.get(id(node))
        if isinstance(p, (ast.Tuple, ast.List, ast.Set)) and isinstance(self.parent.get(id(p)), ast.Compare):
            return True
        if isinstance(p, ast.Compare):
            return True
        if isinstance(p, ast.Call) and isinstance(p.func, ast.Attribute) and p.func.attr in ("startswith", "endswith") \
                and node in p.args:
            return True
        if isinstance(p, ast.Dict) and any(k is node for k in p.keys):
            return True
        return False

    def _argparse_device_default(self, node: ast.AST) -> bool:
        """`parser.add_argument("--device", default="cuda")`: the default is a device value."""
        p = self.parent.get(id(node))
        if not (isinstance(p, ast.keyword) and p.arg == "default"):
            return False
        call = self.parent.get(id(p))
        return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"
                and any(isinstance(a, ast.Constant) and isinstance(a.value, str) and "device" in a.value.lower() for a in call.args))

    def _fstring_edit(self, node: ast.JoinedStr) -> Edit | None:
        """`f"cuda:{rank}"` -> `f"npu:{rank}"`: the literal head of an f-string that builds a device string."""
        start, end = self.pos.span(node)
        m = re.match(r"^([rRbBfF]{1,2})(['\"]{1,3})cuda(?=[:{'\"])", self.text[start:end])
        if not m or "f" not in m.group(1).lower():
            return None
        at = start + m.end() - 4
        return Edit(at, at + 4, "npu")

    def _prefixed_edit(self, node: ast.Constant) -> Edit | None:
        start, end = self.pos.span(node)
        m = _PREFIXED_LIT.match(self.text[start:end])
        if not m:
            return None
        return Edit(start, end, f"{m.group(1)}{m.group(2)}{_npu_backend(m.group(3))}{m.group(2)}")

    def _string(self, node: ast.Constant) -> None:
        value = cast(str, node.value)  # the walk only passes str constants here
        parent = self.parent.get(id(node))
        if isinstance(parent, ast.JoinedStr):
            if parent.values and parent.values[0] is node and re.match(r"^cuda(:|$)", value):
                edit = self._fstring_edit(parent)
                self.add("NPS005", parent, "f-string builds a CUDA device string", (edit,) if edit else ())
                self.refs[-1].group, self.refs[-1].blocker = "device", edit is None
            elif value.startswith("cuda"):
                self.add("NPS005", parent, "f-string starts with \"cuda\" (not a device string npuport can follow)")
            return
        if _CUDA_STR.match(value):
            device, auto = self._device_position(node)
            if not device and self._argparse_device_default(node):
                device, auto = True, False
            if device:
                edit = self._literal(node, _CUDA_LIT, "npu")
                self.add("NPS004", node, f"{value!r} -> {value.replace('cuda', 'npu')!r}", (edit,) if edit else (), auto)
                self.refs[-1].group, self.refs[-1].blocker = "device", edit is None
            elif self._test_position(node):
                edit = self._literal(node, _CUDA_LIT, "npu")
                self.add("NPS005", node, f"{value!r} tested against a device string", (edit,) if edit else ())
                self.refs[-1].group, self.refs[-1].blocker = "device", edit is None
            else:
                self.add("NPS005", node, f"{value!r} used outside a device argument")
                self.refs[-1].group, self.refs[-1].blocker = "device", True
        elif value == "nccl":
            backend, auto = self._backend_position(node)
            if backend or self._test_position(node):
                edit = self._literal(node, _NCCL_LIT, "hccl")
                did = "NPS010" if backend else "NPS011"
                self.add(did, node, "'nccl' -> 'hccl'" if backend else "'nccl' tested against a backend name",
                         (edit,) if edit else (), auto if backend else None)
                self.refs[-1].group, self.refs[-1].blocker = "backend", edit is None
            else:
                self.add("NPS011", node, "'nccl' outside a backend argument")
                self.refs[-1].group, self.refs[-1].blocker = "backend", True
        elif "cuda:nccl" in value.split(",") and _PREFIXED_BACKEND.match(value):
            backend, auto = self._backend_position(node)
            edit = self._prefixed_edit(node) if backend else None
            self.add("NPS012", node, f"{value!r}" + (f" -> {_npu_backend(value)!r}" if edit else ""), (edit,) if edit else ())
            self.refs[-1].group, self.refs[-1].blocker = "backend", edit is None
        elif value in self.apis.env_vars:
            self.add("NPS080", node, f"{value} -> {self.apis.env_vars[value]}")
        elif value.startswith(("NCCL_", "TORCH_NCCL_")) and (row := hccl_env(value)) is not None and row.nccl == value:
            self.add("NPS080", node, f"{value} -> {row.hccl} ({row.meaning})")
        elif value.split(" ")[0] in _NVIDIA_TOOLS:
            self.add("NPS094", node, f"{value.split(' ')[0]} -> {_NVIDIA_TOOLS[value.split(' ')[0]]}")

    # ------------------------------------------------------------ imports and calls
    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif node.module and not node.level:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        if isinstance(node, ast.ImportFrom):
            # `from triton_kernels import XXT` or `from pkg import layers` / `from . import norms` (a CUDA-only module)
            hits = []
            for a in node.names:
                full = f"{node.module}.{a.name}" if node.module else a.name
                mod = self._cuda_module(full)  # a CUDA-only function / Function, not a whole module
                if mod is not None:
                    hits.append((full, mod))
            if hits:  # one reference per statement: the local module is one thing to port
                names = ", ".join(full.rsplit(".", 1)[-1] for full, _ in hits)
                self.add("NPS077", node, f"import of {names} from {node.module or '.'}: {self.cuda_modules[hits[0][1]]}")
                return
        # `import helpers` / `from pkg import layers`: importing a module is not a line a port changes (the module
        # is ported where it is); its CUDA-only functions are, where they are imported and called
        for key, did in self.apis.imports.items():
            if any(m == key or m.startswith(key + ".") for m in modules):
                # one reference per imported name: `from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam`
                bound = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else [key]
                for name in bound:
                    self.add(did, node, f"import of {key}" + (f" ({name})" if name != key else ""))
                return

    def _compile(self, node: ast.Call) -> None:
        if self.dotted(node.func) != "torch.compile":
            return
        for kw in node.keywords:
            if isinstance(kw.value, ast.Constant) and (kw.arg, kw.value.value) in (("mode", "reduce-overhead"), ("mode", "max-autotune"), ("backend", "cudagraphs")):
                self.add("NPS083", kw.value, f"torch.compile({kw.arg}={kw.value.value!r})")
                return
        self.add("NPS084", node, "torch.compile: check the backend on NPU")

    def run(self) -> list[Ref]:
        for node in ast.walk(self.tree):
            parent = self.parent.get(id(node))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._import(node)
            elif isinstance(node, ast.Attribute):
                if isinstance(parent, ast.Attribute) and parent.value is node:
                    continue  # the outermost attribute of a chain reports it
                dotted = self.dotted(node)
                if dotted and (dotted.startswith("torch.cuda") or self._matches_torch_api(dotted) or self._matches_compiled(dotted)):
                    self._reference(node, dotted)
                elif dotted == "torch.compile" and not (isinstance(parent, ast.Call) and parent.func is node):
                    self.add("NPS084", node, "@torch.compile: check the backend on NPU")
                elif node.attr == "is_cuda":
                    edit = self._attr_token(node, "is_npu")
                    self.add("NPS006", node, ".is_cuda -> .is_npu", (edit,) if edit else ())
                elif node.attr == "cuda" and isinstance(parent, ast.Call) and parent.func is node:
                    edit = self._attr_token(node, "npu")
                    self.add("NPS003", node, ".cuda() -> .npu()", (edit,) if edit else ())
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if isinstance(parent, ast.Attribute) and parent.value is node:
                    continue
                dotted = self.alias.get(node.id)
                if dotted and dotted != node.id and not self._shadowed(node):
                    self._reference(node, dotted)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                self._string(node)
            elif isinstance(node, ast.Call):
                self._compile(node)
        self.refs.sort(key=lambda r: (r.line, r.col, r.id))
        return self.refs

    def _matches_compiled(self, dotted: str) -> bool:
        if self._cuda_module(dotted):
            return True
        return any((dotted == k or dotted.startswith(k + ".")) and did in _COMPILED_IMPORT_IDS for k, did in self.apis.imports.items())

    def _cuda_module(self, dotted: str, whole_modules: bool = False) -> str | None:
        """The entry of `cuda_modules` that `dotted` falls under: a CUDA-only name of a local module
        (`triton_kernels.XXT`, and what is below it), or with `whole_modules` the module itself (for imports)."""
        for key, what in self.cuda_modules.items():
            is_module = " holds " in what
            if is_module and not whole_modules:
                continue
            if dotted == key or (not is_module and dotted.startswith(key + ".")):
                return key
        return None

    def _matches_torch_api(self, dotted: str) -> bool:
        return any(dotted == k or dotted.startswith(k + ".") for k in self.apis.torch_apis)

    # ------------------------------------------------------------ import rewrites (migrate)
    def import_edits(self) -> list[Edit]:
        """`from torch.cuda[.amp] import X` -> `from torch.npu[.amp] import X` when every X has an NPU twin."""
        return list(self._import_edits)

    def _find_import_edits(self) -> list[Edit]:
        edits = []
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.ImportFrom) and not node.level and node.module):
                continue
            parts = node.module.split(".")
            if parts[:2] != ["torch", "cuda"]:
                continue
            names = [parts[2]] if len(parts) > 2 else [a.name for a in node.names]
            ok = all(n in self.apis.npu_names or n in ("amp", "graphs", "streams") for n in names)
            if len(parts) == 2:
                ok = ok and all(self.apis.groups.get(n) in (None, "NPS030", "NPS041", "NPS040", "NPS051") and self.apis.renamed.get(n, n) == n for n in names)
            if not ok:
                continue
            start, end = self.pos.span(node)
            m = re.match(r"from\s+torch\s*\.\s*cuda\b", self.text[start:end])
            if m:
                cuda_at = self.text.index("cuda", start + m.start(), start + m.end())
                edits.append(Edit(cuda_at, cuda_at + 4, "npu"))
                self.migrated_aliases.update(a.asname or a.name for a in node.names)
        return edits
