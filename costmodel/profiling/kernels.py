"""Real operators in PyTorch: one callable per sample point, and the device's own peak figures.

Inputs are allocated once per point, outside the timed calls; each call
runs exactly what an eager PyTorch training step runs for that operator
(``F.linear``, ``F.scaled_dot_product_attention``, ``F.rms_norm``, an
``AdamW`` step, ...). Backward kernels are timed through
``torch.autograd.grad`` on a retained graph, so that only the backward
kernels run in the timed call. Activations are 16-bit, optimizer state fp32.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from costmodel.profiling.measure import TimingPolicy, measure
from costmodel.specs.errors import SpecError

if TYPE_CHECKING:  # the collective ranks import this module for import_torch alone: keep it light
    from costmodel.profiling.design import SamplePoint

__all__ = ["device_description", "import_torch", "make_kernel", "measure_physics", "memory_limit_bytes"]

_TORCH_DTYPES: Final = {"bf16": "bfloat16", "fp16": "float16"}
# Peak probes: a square GEMM and a copy large enough to leave caches and launch costs far behind.
_PEAK_GEMM: Final = {"cpu": 1536, "cuda": 8192}
_COPY_ELEMENTS: Final = {"cpu": 2**24, "cuda": 2**28}  # fp32: 64 MiB and 1 GiB each way


def import_torch() -> Any:
    """``torch``, or a one-line error saying how to install it."""
    try:
        import torch
    except ImportError:
        raise SpecError("torch", "not installed", "installed to measure operators: pip install 'parplan[profile]'"
                        ) from None
    return torch


def device_description(device: str) -> dict[str, Any]:
    """Name, compute units and software versions of ``device`` (``cpu`` or ``cuda``)."""
    torch = import_torch()
    out: dict[str, Any] = {"torch": torch.__version__}
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        out.update(name=props.name, compute_units=props.multi_processor_count, cuda=torch.version.cuda,
                   memory_bytes=props.total_memory)
    else:
        out.update(name=_cpu_name(), compute_units=torch.get_num_threads(), threads=torch.get_num_threads())
    return out


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def memory_limit_bytes(device: str) -> float:
    """Memory one point's tensors may take: half of what is free now (a quarter of RAM when unknown)."""
    torch = import_torch()
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return 0.5 * free
    try:
        return 0.5 * os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30


def measure_physics(device: str, dtype: str, deadline: float) -> dict[str, Any]:
    """Peak FLOP/s of ``dtype`` (a large square GEMM) and memory bandwidth (a large copy), as measured.

    Returns
    -------
    dict
        ``peak_flops`` ({dtype: FLOP/s}), ``hbm_bandwidth_bytes_per_s``, ``num_sms``
        (streaming multiprocessors, or CPU threads) and ``source``.
    """
    torch = import_torch()
    policy = TimingPolicy(warmup=1, min_repeats=3, max_repeats=10, target_s=0.2)
    size = _PEAK_GEMM[device]
    square = torch.randn(size, size, dtype=getattr(torch, _TORCH_DTYPES[dtype]), device=device)
    # partial objects hold the tensors only while measured, so the GEMM's are freed before the copy's exist
    gemm = measure(partial(torch.nn.functional.linear, square, square), device=device, deadline=deadline,
                   policy=policy)
    del square
    source = torch.empty(_COPY_ELEMENTS[device], dtype=torch.float32, device=device).fill_(1.0)
    copy = measure(partial(torch.empty_like(source).copy_, source), device=device, deadline=deadline, policy=policy)
    del source
    if gemm is None or copy is None:
        raise SpecError("budget-seconds", "too small", "long enough to measure the device's peak figures first")
    units = device_description(device)["compute_units"]
    return {
        "peak_flops": {dtype: 2.0 * size**3 / gemm.min_s},
        "hbm_bandwidth_bytes_per_s": 2.0 * 4 * _COPY_ELEMENTS[device] / copy.min_s,
        "num_sms": int(units),
        "source": (f"measured by parplan profile: best of a {size}^3 {dtype} GEMM and of a "
                   f"{_COPY_ELEMENTS[device] * 4 // 2**20} MiB fp32 copy"),
    }


def make_kernel(point: SamplePoint, device: str, seed: int = 0) -> Callable[[], Any]:
    """One execution of ``point``'s operator on ``device``, its inputs allocated now.

    Raises
    ------
    SpecError
        If the point's table or kernel has no implementation here.
    """
    torch = import_torch()
    torch.manual_seed(seed)
    if point.table.startswith("gemm"):
        return _gemm(torch, point, device)
    if point.table.startswith("attention"):
        return _attention(torch, point, device)
    if point.table == "memory" and point.kernel is not None:
        return _memory(torch, point, device)
    raise SpecError("sample table", point.table, "gemm_bf16, gemm_fp16, attention_fwd, attention_bwd or memory")


def _gemm(torch: Any, point: SamplePoint, device: str) -> Callable[[], Any]:
    m, n, k = point.shape
    dtype = getattr(torch, _TORCH_DTYPES[point.table.removeprefix("gemm_")])
    x = torch.randn(m, k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device)
    linear = torch.nn.functional.linear
    return lambda: linear(x, w)  # Y[m, n] = X[m, k] @ W[n, k]^T, the profile's GEMM convention


def _attention(torch: Any, point: SamplePoint, device: str) -> Callable[[], Any]:
    b, s, h, kv, d, causal = point.shape
    backward = point.table == "attention_bwd"
    shape_q, shape_kv = (b, h, s, d), (b, kv, s, d)
    q, k, v = (torch.randn(*shape, dtype=torch.bfloat16, device=device, requires_grad=backward)
               for shape in (shape_q, shape_kv, shape_kv))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if not backward:
        return lambda: sdpa(q, k, v, is_causal=bool(causal), enable_gqa=kv != h)
    out = sdpa(q, k, v, is_causal=bool(causal), enable_gqa=kv != h)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


def _memory(torch: Any, point: SamplePoint, device: str) -> Callable[[], Any]:
    kernel = point.kernel
    assert kernel is not None
    elements, inner = point.shape
    if kernel.kind == "optimizer":
        param = torch.zeros(elements, dtype=torch.float32, device=device, requires_grad=True)
        param.grad = torch.randn_like(param)
        fused = {"fused": True} if device == "cuda" else {"foreach": True}
        optimizer = torch.optim.AdamW([param], lr=1e-4, **fused)
        optimizer.step()  # creates the moment buffers outside the timed calls
        return optimizer.step
    shape = (elements // inner, inner)
    grad_needed = kernel.phase == "bwd"
    tensor = lambda: torch.randn(*shape, dtype=torch.bfloat16, device=device, requires_grad=grad_needed)  # noqa: E731
    functional = torch.nn.functional
    if kernel.kind == "residual":
        x, y, z = tensor(), tensor(), tensor()
        return lambda: torch.add(x, y, out=z)
    if kernel.kind == "norm":
        x = tensor()
        weight = torch.ones(inner, dtype=torch.bfloat16, device=device, requires_grad=grad_needed)
        if kernel.variant == "rmsnorm":
            forward = lambda: functional.rms_norm(x, (inner,), weight)  # noqa: E731
            inputs: tuple[Any, ...] = (x, weight)
        else:
            bias = torch.zeros(inner, dtype=torch.bfloat16, device=device, requires_grad=grad_needed)
            forward = lambda: functional.layer_norm(x, (inner,), weight, bias)  # noqa: E731
            inputs = (x, weight, bias)
    elif kernel.kind == "activation" and kernel.variant == "swiglu":
        gate, up = tensor(), tensor()
        forward = lambda: functional.silu(gate) * up  # noqa: E731
        inputs = (gate, up)
    elif kernel.kind == "activation":
        x = tensor()
        forward = lambda: functional.gelu(x, approximate="tanh")  # noqa: E731
        inputs = (x,)
    elif kernel.kind == "softmax":
        x = tensor()
        forward = lambda: torch.softmax(x, dim=-1)  # noqa: E731
        inputs = (x,)
    else:
        raise SpecError("memory kernel", kernel.kind, "norm, activation, residual, softmax or optimizer")
    if not grad_needed:
        return forward
    out = forward()
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)
