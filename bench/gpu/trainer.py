#!/usr/bin/env python3
"""trainer.py — the GPU wedge kit's trainer: a real PyTorch training loop fed by a DataLoader.

    python3 trainer.py --data DIR [--device cuda|cpu] [--model resnet18|tiny] [--batch 128]
                       [--workers 8] [--repeat 1] [--mode train|synthetic|loader]
                       [--cpu-step-ms 0] [--warmup 4] [--duration 8] [--go FILE] --out FILE

The input pipeline is torchvision's usual ImageNet recipe on JPEG files made by the driver with
Pillow: each DataLoader worker opens a JPEG (Pillow decode), RandomResizedCrop(crop),
RandomHorizontalFlip, ToTensor, Normalize; batches are collated by the workers and pinned.

Device step
  --device cuda: torchvision ResNet-18 (or --model), channels_last, bf16 autocast, SGD, on the
      GPU. The step is asynchronous, as in any PyTorch job: the host launches the kernels and goes
      back to the loader for the next batch; the GPU idles only when no batch is ready.
      accelerator_busy = Σ GPU time of the steps in the window (CUDA events around each step)
      ÷ window.
  --device cpu (the kit's CPU-only mode, no GPU): the batch is average-pooled to 1/8 size and a
      tiny CNN (--model tiny) runs forward/backward/SGD on the host, then the step is padded with
      a sleep to --cpu-step-ms, standing in for the time a GPU would compute. accelerator_busy =
      Σ step time ÷ window. The host CPU spent in the tiny model counts as trainer CPU.
  --repeat K trains K times on each batch (the GPU-bound control: K× the device work per sample).

Modes (calibration): synthetic = device steps on one random batch made on the device, no loader
(the device's own rate); loader = the DataLoader alone, batches dropped (the pipeline's rate and
its CPU cost per sample).

The trainer builds everything, then waits for the --go file (bounded), warms up for --warmup
seconds, measures for --duration seconds and writes one JSON object to --out (atomically).
CPU seconds and run delay (time runnable but waiting for a CPU, /proc/<pid>/task/*/schedstat)
are summed over the main process and the DataLoader workers in the window.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of one process (all its threads), seconds; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_run_delay_s(pid: int) -> float:
    """Σ run_delay over the threads of one process (schedstat field 2, ns), seconds."""
    tot = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                tot += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return tot / 1e9


class JpegFolder:
    """Map-style dataset over the JPEG files in a folder, cycled to a virtual length."""

    def __init__(self, folder: Path, transform, length: int = 10_000_000):
        self.files = sorted(str(p) for p in folder.glob("*.jpg"))
        if not self.files:
            raise SystemExit(f"no *.jpg in {folder}")
        self.transform, self.length = transform, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        from PIL import Image
        with Image.open(self.files[i % len(self.files)]) as im:
            x = self.transform(im.convert("RGB"))
        return x, i % 1000


def tiny_cnn(torch):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 1000))


def make_jpegs(folder: Path, width: int, count: int, seed: int) -> None:
    """Photo-like JPEGs (smooth gradients, blobs and sensor noise), 4:3, quality 90."""
    import numpy as np
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    w, h = width, max(1, width * 3 // 4)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for i in range(count):
        img = np.empty((h, w, 3), np.float32)
        for ch in range(3):
            fx, fy, ph = rng.uniform(0.5, 6, 2).tolist() + [rng.uniform(0, 6.3)]
            img[..., ch] = 128 + 90 * np.sin(fx * xx / w * 6.3 + ph) * np.cos(fy * yy / h * 6.3)
        for _ in range(6):
            cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(w / 20, w / 5)
            img += (rng.uniform(-80, 80, 3) *
                    np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))[..., None])
        img += rng.normal(0, 12, img.shape)
        out = folder / f"img{i:04d}.jpg"
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(out, quality=90)


def wait_go(go: str | None, limit_s: float = 300.0) -> None:
    if not go:
        return
    t_end = time.monotonic() + limit_s
    while not os.path.exists(go):
        if time.monotonic() > t_end:
            raise SystemExit(f"no GO file {go} after {limit_s:.0f} s")
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--make-data", action="store_true",
                   help="write --count JPEGs of --width px (4:3) into --data and exit")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--count", type=int, default=128)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--model", default="resnet18", help="torchvision model name, or 'tiny'")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--prefetch-factor", type=int, default=2)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--repeat", type=int, default=1, help="device steps per batch")
    p.add_argument("--mode", choices=["train", "synthetic", "loader"], default="train")
    p.add_argument("--cpu-step-ms", type=float, default=0.0,
                   help="--device cpu: pad each step with a sleep to this many ms")
    p.add_argument("--warmup", type=float, default=4.0)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--go", default=None, help="wait for this file before starting the clock")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--ready", default=None, help="touch this file once built, before --go")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.make_data:
        make_jpegs(a.data, a.width, a.count, a.seed)
        return 0
    if a.out is None:
        p.error("--out is required")

    t_launch = time.monotonic()
    import torch
    import torchvision
    from torchvision import transforms as T

    torch.manual_seed(a.seed)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch.cuda.is_available() is False")
    dev = torch.device(a.device)
    if not cuda:
        torch.set_num_threads(1)  # the host's main loop is one thread, as the GPU main loop is
    if cuda:
        torch.backends.cudnn.benchmark = True
    model = tiny_cnn(torch) if a.model == "tiny" else getattr(torchvision.models, a.model)(
        num_classes=1000)
    model = model.to(dev)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y) -> None:
        for _ in range(a.repeat):
            if cuda:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = loss_fn(model(x), y)
            else:
                loss = loss_fn(model(torch.nn.functional.avg_pool2d(x, 8)), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    def to_dev(x, y):
        if cuda:
            x = x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.to(dev, non_blocking=True)
        return x, y

    loader = None
    if a.mode != "synthetic":
        tf = T.Compose([T.RandomResizedCrop(a.crop), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(MEAN, STD)])
        ds = JpegFolder(a.data, tf)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=a.batch, shuffle=False, num_workers=a.workers, pin_memory=cuda,
            drop_last=True, persistent_workers=a.workers > 0,
            prefetch_factor=a.prefetch_factor if a.workers > 0 else None)
    else:
        xs = torch.randn(a.batch, 3, a.crop, a.crop, device=dev)
        ys = torch.randint(0, 1000, (a.batch,), device=dev)
        if cuda:
            xs = xs.contiguous(memory_format=torch.channels_last)
    t_ready = time.monotonic()
    if a.ready:
        Path(a.ready).touch()
    wait_go(a.go)
    t_go = time.monotonic()
    it = iter(loader) if loader is not None else None
    worker_pids: list[int] = []
    if it is not None and a.workers > 0:
        worker_pids = [w.pid for w in getattr(it, "_workers", [])]
    pids = [os.getpid()] + worker_pids

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def one_batch() -> tuple[float, object, object]:
        """Returns (host seconds in the step incl. padding, start event, end event)."""
        if it is None:
            x, y = xs, ys
        else:
            x, y = next(it)
        if a.mode == "loader":
            return 0.0, None, None
        x, y = to_dev(x, y)
        t0 = time.monotonic()
        e0 = e1 = None
        if cuda:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
        step(x, y)
        if cuda:
            e1.record()
        elif a.cpu_step_ms > 0:  # the emulated device: each of the --repeat steps takes this
            left = a.cpu_step_ms * a.repeat / 1000.0 - (time.monotonic() - t0)
            if left > 0:
                time.sleep(left)
        return time.monotonic() - t0, e0, e1

    # Warm-up: workers start, cudnn picks its kernels, the pipeline fills.
    t_w = time.monotonic() + a.warmup
    warm_batches = 0
    while time.monotonic() < t_w or warm_batches < 2:
        one_batch()
        warm_batches += 1
    sync()

    cpu0 = sum(proc_cpu_s(q) for q in pids)
    rd0 = sum(proc_run_delay_s(q) for q in pids)
    t_start = time.monotonic()
    t_stop = t_start + a.duration
    batches = 0
    host_step_s = 0.0
    events = []
    while time.monotonic() < t_stop:
        hs, e0, e1 = one_batch()
        host_step_s += hs
        if e0 is not None:
            events.append((e0, e1))
        batches += 1
    sync()
    t_end = time.monotonic()
    cpu1 = sum(proc_cpu_s(q) for q in pids)
    rd1 = sum(proc_run_delay_s(q) for q in pids)
    window = t_end - t_start
    if cuda:
        busy_s = sum(e0.elapsed_time(e1) for e0, e1 in events) / 1000.0
    else:
        busy_s = host_step_s
    res = {
        "samples_per_s": batches * a.batch / window,
        "batches": batches,
        "duration_s": window,
        "accelerator_busy": (min(1.0, busy_s / window) if a.mode != "loader" else None),
        "cpu_seconds": cpu1 - cpu0,
        "cpu_cores": (cpu1 - cpu0) / window,
        "run_delay_seconds": rd1 - rd0,
        "cpu_s_per_sample": ((cpu1 - cpu0) / (batches * a.batch) if batches else None),
        "t_start_mono": t_start, "t_end_mono": t_end,
        "startup_s": t_ready - t_launch, "warmup_batches": warm_batches,
        "go_wait_s": t_go - t_ready,
        "processes": len(pids),
        "config": {"device": a.device, "model": a.model, "batch": a.batch,
                   "workers": a.workers, "crop": a.crop, "repeat": a.repeat, "mode": a.mode,
                   "cpu_step_ms": a.cpu_step_ms, "warmup": a.warmup, "duration": a.duration,
                   "images": len(loader.dataset.files) if loader is not None else 0},
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }
    tmp = a.out.with_suffix(a.out.suffix + ".tmp")
    tmp.write_text(json.dumps(res))
    os.replace(tmp, a.out)
    del it  # shuts the workers down
    return 0


if __name__ == "__main__":
    sys.exit(main())
