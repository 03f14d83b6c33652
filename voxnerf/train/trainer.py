"""The training loop: batches of rays, a loss, an optimizer step, and the strategy's hooks. Plain PyTorch."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from voxnerf.data.footprint import pixel_footprint
from voxnerf.data.normalize import space_for
from voxnerf.data.scene import Scene
from voxnerf.render.model import Model
from voxnerf.render.renderer import RenderConfig, render_rays
from voxnerf.run.checkpoint import CHECKPOINT, checkpoint_model, load_checkpoint, save_atomic
from voxnerf.run.config import LR_RANK_RULES, TrainConfig, config_to_dict
from voxnerf.run.folder import scene_fingerprints
from voxnerf.run.load import Run, SceneRecord
from voxnerf.run.metrics import mse_to_psnr
from voxnerf.run.scores import write_scores
from voxnerf.system.allocator import release_freed_memory
from voxnerf.system.device import amp_dtype_for
from voxnerf.system.threads import thread_policy
from voxnerf.system.tuning import tune_process
from voxnerf.train.distributed import PeerLost, World
from voxnerf.train.interrupt import StopRequest
from voxnerf.train.losses import opacity_loss
from voxnerf.system.progress import progress_bar
from voxnerf.train.ray_sampler import RaySampler
from voxnerf.train.strategy import TopologyStrategy, occupancy_for_ranks


class Trainer:
    """Trains a Model (a field and its occupancy estimator) on a scene and writes a run folder.

    Run folder: checkpoint.pt (atomic), config.yaml, metrics.jsonl, metrics.csv, eval.json (after `evaluate`).

    Args:
        scene: the scene, images loaded.
        cfg: the training configuration.
        out: the run folder.
        device: torch device.
        resume: continue from out/checkpoint.pt (same schedule, optimizer and random state).
        init: a checkpoint whose field initializes this run (fine-tuning), optimizer and schedule fresh.
        eval_at: training times (seconds) at which to evaluate the test views; evaluation time is not counted.
        quiet: no progress bar.
        world: this process's rank in a multi-process job (default: a single process); see voxnerf.train.distributed.
        on_step: callables run after each step as hook(trainer, stats) (e.g. voxnerf.view.viewer.TrainingViewer); their
            time is not training time.
    """

    def __init__(self, scene: Scene, cfg: TrainConfig, out: Path, device: torch.device, resume: bool = False,
                 init: Path | None = None, eval_at: tuple[float, ...] = (), quiet: bool = False,
                 world: World | None = None, on_step: Sequence[Callable[[Trainer, dict], None]] = ()):
        self.scene, self.cfg, self.out, self.device, self.quiet = scene, cfg, Path(out), device, quiet
        tune_process()  # freed memory kept for reuse, subnormal floats flushed to zero (voxnerf.system.tuning)
        self.world = world or World()
        self.on_step = list(on_step)
        # threads 0: follow the cores other processes leave free (one process; ranks keep torch's count)
        self.threads = thread_policy(cfg.threads or (0 if self.world.size == 1 else torch.get_num_threads()))
        self.amp_dtype = amp_dtype_for(cfg.precision, device)
        # fp16 gradients underflow without loss scaling: on CUDA, and on the CPU where fp16 stands in for it
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp_dtype == torch.float16)
        self.generator = self.world.generator(cfg.seed, device=device)
        self.step, self.elapsed, self.n_rays = 0, 0.0, cfg.optim.min_rays
        self.own_time = 0.0  # this process's training time to the end of its last step (rank 0's is the job's)
        self.eval_at = sorted(eval_at)
        self.stop = StopRequest()  # enter it (as train_run does) to stop between steps on SIGINT and SIGTERM
        self.fingerprints = scene_fingerprints(scene)  # checkpoints name their scene's content (voxnerf.run.folder)
        self.snapshots: list[dict] = []
        space = space_for(scene, cfg.space, cfg.contract_inner, cfg.levels[-1].resolution)
        train_cameras = scene.cameras.subset(scene.split_indices("train"))
        self.model = Model.build(cfg.field, cfg.levels[0].resolution, space, cfg.seed, train_cameras=train_cameras)
        if init is not None:
            self.model = checkpoint_model(load_checkpoint(init, "cpu"), init)
        self.model.to(device)
        self.finest_cameras = train_cameras.scaled(cfg.levels[-1].image_scale)
        self.strategy = TopologyStrategy(occupancy_for_ranks(cfg.occupancy, self.world.size), cfg.levels,
                                         cfg.render.step_ratio, self.world.max_, (self.world.rank, self.world.size),
                                         self._footprint)
        self.optimizer = self._make_optimizer()
        if resume:
            path = self.out / CHECKPOINT
            self._restore(load_checkpoint(path, "cpu"), path)  # moved to the device piece by piece
        self.sampler = RaySampler(scene, scene.split_indices("train"), device, self.model.space,
                                  progress=not quiet and self.world.is_main)
        self.sampler.at_scale(self.strategy.level(self.progress()).image_scale)  # decoded off the training clock

    # ---- setup ----------------------------------------------------------------------------------------------
    def _footprint(self, g: torch.Tensor, cell: float) -> torch.Tensor:
        """(K,) pixels a cell of edge `cell` at grid points g (K, 3) spans in the training photos at the last
        level's scale, in the model's space: the checkpoint's after --resume (a run from an earlier version may have
        another box than this version would frame)."""
        return pixel_footprint(self.finest_cameras, self.model.space, g, cell)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        groups = self.model.field.param_groups(self.cfg.optim)
        if self.model.color_maps is not None:
            groups.append({"name": "color_maps", "params": [self.model.color_maps.maps],
                           "lr": self.cfg.optim.lr_color_maps})
        for group in groups:
            group["base_lr"] = group["lr"]
        return torch.optim.Adam(groups, betas=(0.9, 0.99), eps=1e-15, fused=True)

    def _restore(self, ckpt: dict, path: Path) -> None:
        self.model = checkpoint_model(ckpt, path).to(self.device)
        # the run keeps the box of interest it recorded (an earlier version may have framed another, e.g. a masks'
        # visual hull: voxnerf.run.folder.scene_mismatch), as its space is the checkpoint's
        self.scene = replace(self.scene, bbox=np.asarray(ckpt["scene"]["bbox"], np.float64))
        self.optimizer = self._make_optimizer()
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.step, self.elapsed, self.n_rays = ckpt["step"], ckpt["elapsed"], ckpt["n_rays"]
        self.own_time = self.elapsed
        same_kind = ckpt.get("rng_device", "cpu") == self.device.type  # CPU and CUDA streams differ in state
        self.generator = self.world.generator(self.cfg.seed, ckpt["rng"] if same_kind else None, self.step,
                                              self.device)
        if ckpt.get("scaler"):  # an fp16 run's loss scale (empty when it was saved without fp16 autocast)
            self.scaler.load_state_dict(ckpt["scaler"])
        self.snapshots = ckpt.get("snapshots", [])
        self.eval_at = [t for t in self.eval_at if t > self.elapsed]

    def checkpoint(self) -> None:
        """Write the run's state atomically to out/checkpoint.pt (rank 0 only)."""
        if not self.world.is_main:
            return
        save_atomic({
            "config": config_to_dict(self.cfg),
            "model": self.model.state(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "elapsed": self.own_time,  # rank 0's: the job's clock to the end of the last step
            "n_rays": self.n_rays,
            "rng": self.generator.get_state(),
            "rng_device": self.generator.device.type,
            "scaler": self.scaler.state_dict(),
            "scene": {**SceneRecord.of(self.scene, self.model.space).to_dict(), **self.fingerprints},
            "snapshots": self.snapshots,
        }, self.out / CHECKPOINT)

    # ---- schedule -------------------------------------------------------------------------------------------
    def progress(self) -> float:
        """Fraction of the budget used: the larger of steps/max_steps and time/max_time."""
        p = self.step / self.cfg.max_steps if self.cfg.max_steps else 0.0
        if self.cfg.max_time:
            p = max(p, self.elapsed / self.cfg.max_time)
        return min(p, 1.0)

    def _render_config(self) -> RenderConfig:
        r = self.cfg.render
        if self.strategy.skipping(self.step):
            return r
        return RenderConfig(**{**asdict(r), "alpha_min": 0.0, "color_weight_min": 0.0})

    def _set_learning_rates(self, progress: float) -> None:
        """The configured rates, decayed exponentially over the budget and grown with the ranks by the rule
        `optim.lr_ranks` names (voxnerf.run.config.LR_RANK_RULES): a step of N ranks averages N batches, and the less
        noisy mean allows longer steps (benchmarks/log/2026-11-23-cuda-path-and-ranks.md)."""
        o = self.cfg.optim
        scale = o.lr_final_ratio ** progress * LR_RANK_RULES[o.lr_ranks](self.world.size)
        for group in self.optimizer.param_groups:
            group["lr"] = group["base_lr"] * scale

    # ---- one step -------------------------------------------------------------------------------------------
    def train_step(self) -> dict:
        """One optimizer step on a fresh batch of n_rays rays per rank; returns its statistics, with "stop": whether
        any rank was asked to stop.

        Every rank draws its own full batch (the global batch grows with the ranks, as in data-parallel training of
        peers); the learning rates grow with it (`_set_learning_rates`) and the occupancy schedule counts rays, not
        steps (`occupancy_for_ranks`). The gradient exchange also carries rank 0's clock and every rank's stop
        request, so that all ranks follow one time budget and stop at the same step without a collective of their
        own: `elapsed` becomes rank 0's training time as of the exchange (a single process's, to the step's end)."""
        start = time.perf_counter()
        progress = self.progress()
        level = self.strategy.level(progress)
        self._set_learning_rates(progress)
        n_total = self.n_rays * self.world.size
        batch = self.sampler.sample(self.n_rays, level.image_scale, self.generator)
        with self.model.field.row_spaces() as spaces:  # the grid rows ranks exchange gradients of
            result = render_rays(self.model, batch["origins"], batch["dirs"], batch["background"],
                                 self._render_config(), self.generator, self.amp_dtype,
                                 with_distortion=self.cfg.optim.distortion_weight > 0, with_depth=False,
                                 images=batch["image"], near=batch["near"])
            mse = torch.nn.functional.mse_loss(result.rgb, batch["target"])
            loss = sum(self._regularization(result, batch["alpha"]), mse)
            self.scaler.scale(loss).backward()
        clock = self.own_time + time.perf_counter() - start if self.world.is_main else 0.0
        num_samples, self.elapsed, stops = self.world.all_reduce_gradients(
            self.model.parameters(), [result.num_samples, clock, float(self.stop.requested)], spaces)
        del spaces  # the stencils (N, 8) need not outlive the exchange (a refinement below is the memory peak)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        for group in self.optimizer.param_groups:  # zero_grad(set_to_none=True) less its profiler annotation
            for p in group["params"]:
                p.grad = None
        if self.strategy.step_post_backward(self.step, progress, self.model, self.optimizer):
            self.world.check_identical(self.model, f"the topology change after step {self.step}")
        samples_per_ray = num_samples / max(n_total, 1)
        o = self.cfg.optim
        self.n_rays = int(np.clip(o.target_samples / max(samples_per_ray, 1.0), o.min_rays, o.max_rays))
        self.own_time += time.perf_counter() - start
        if self.world.size == 1:  # no agreement needed: the exact time, to the end of the step
            self.elapsed = self.own_time
        return {
            "stop": stops > 0,
            "loss": loss.detach(),
            "mse": mse.detach(),
            "rays": n_total,
            "samples_per_ray": samples_per_ray,
            "samples": result.num_samples,
            "candidates": result.num_candidates,  # this rank's count, computed on logging steps only
            "color_samples_per_ray": result.num_color_samples / max(len(batch["origins"]), 1),
            "resolution": self.model.estimator.resolution,
            "image_scale": level.image_scale,
        }

    def log_row(self, stats: dict) -> dict:
        """A step's statistics as plain numbers for the log, with the values that wait on the device (loss, PSNR,
        the loss scale, occupied cells) read only here: on logging steps, not every step. The loss scale is the
        GradScaler's (1 without fp16): it halves at every step skipped for an inf or NaN gradient."""
        row = {k: v for k, v in stats.items() if k not in ("mse", "samples", "candidates")}
        row.update(loss=stats["loss"].item(), loss_scale=self.scaler.get_scale(),
                   psnr=mse_to_psnr(stats["mse"].item()),
                   skipped=1.0 - stats["samples"] / max(stats["candidates"]().item(), 1),
                   occupied=int(self.model.estimator.occupied.sum()),
                   parameters=sum(p.numel() for p in self.model.parameters()))
        return row

    def _regularization(self, result, alpha: torch.Tensor) -> list[torch.Tensor]:
        """The weighted regularizers in use: opacity entropy (rays either hit something or see the background) and
        opacity against the pixels' alpha (n,) (one term, `opacity_loss`), sample sparsity, distortion, and the
        field's own (e.g. total variation of a grid); a term whose weight is 0 is not computed."""
        o = self.cfg.optim
        n_rays = max(len(alpha), 1)
        terms = [
            (o.entropy_weight or o.alpha_weight,
             lambda: opacity_loss(result.opacity, alpha, o.entropy_weight, o.alpha_weight)),
            (o.sparsity_weight, lambda: result.sample_alpha_sum * (o.sparsity_weight / n_rays)),
            (o.distortion_weight, lambda: result.distortion * (o.distortion_weight / n_rays)),
        ]
        field_term = self.model.field.regularization(o, self.generator)  # 0.0 where the field has none
        return [term() for weight, term in terms if weight] + ([field_term] if torch.is_tensor(field_term) else [])

    # ---- loop -----------------------------------------------------------------------------------------------
    def train(self) -> dict:
        """Train until the budget is spent (or Ctrl-C); checkpoints atomically along the way and at the end."""
        main = self.world.is_main
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.yaml").write_text(_to_yaml(config_to_dict(self.cfg)))
        logger = MetricsLogger(self.out, append=self.step > 0) if main else None
        bar = progress_bar(self.quiet or not main, dynamic_ncols=True,
                           bar_format="{l_bar}{bar}| {n:.0f}% [{elapsed}<{remaining}] {postfix}")
        interrupted = False
        rays_done, t_window = 0, time.perf_counter()
        try:
            while self.progress() < 1.0:
                self.threads.adjust()
                stats = self.train_step()
                self.step += 1
                # the ranks agreed on the stop requests made before the step's exchange (a later one stops the next
                # step); a single process also heeds one that came after
                stop = stats.pop("stop") or (self.world.size == 1 and self.stop.requested)
                rays_done += stats["rays"]
                self._snapshot_if_due()
                if main and self.step % self.cfg.log_every == 0:
                    now = time.perf_counter()
                    stats = self.log_row(stats)
                    stats.update(step=self.step, time=round(self.elapsed, 3), rays_per_s=rays_done / (now - t_window))
                    rays_done, t_window = 0, now
                    logger.write(stats)
                    bar.set_postfix_str(
                        f"step {self.step} loss {stats['loss']:.4f} psnr {stats['psnr']:.2f} "
                        f"{stats['rays_per_s'] / 1e3:.1f}k rays/s {stats['samples_per_ray']:.1f} spr "
                        f"R{stats['resolution']} occ {stats['occupied']}")
                bar.n = 100 * self.progress()
                bar.refresh()
                if self.step % self.cfg.checkpoint_every == 0:
                    self.checkpoint()
                if stop:
                    interrupted = True
                    break
                for hook in self.on_step:
                    hook(self, stats)
        except KeyboardInterrupt:
            interrupted = True
        except PeerLost as e:
            raise self._saved_after(e) from None
        finally:
            bar.close()
            if logger is not None:
                logger.close()
        self.checkpoint()
        return {"step": self.step, "elapsed": self.own_time, "interrupted": interrupted, "snapshots": self.snapshots}

    def _saved_after(self, error: PeerLost) -> PeerLost:
        """`error` (a lost peer) once rank 0 has saved its latest state, with a note saying where."""
        if not self.world.is_main:
            return error
        self.checkpoint()
        return PeerLost(f"{error}; rank 0 saved its latest state (step {self.step}) to {self.out / CHECKPOINT}")

    def _snapshot_if_due(self) -> None:
        while self.eval_at and self.elapsed >= self.eval_at[0]:
            t = self.eval_at.pop(0)
            if not self.world.is_main:
                continue
            scores = self.evaluate(every=self.cfg.eval_every_view, with_lpips=False, write=False)
            self.snapshots.append({"time": t, "step": self.step, "psnr": scores["mean"]["psnr"]})

    # ---- evaluation -----------------------------------------------------------------------------------------
    def as_run(self) -> Run:
        """The model as it is now, as a loaded run is (voxnerf.run.load.Run) on the trainer's scene: what renders and
        scores it (`Run.render_view`, `evaluate`), and what a viewer of the training shows."""
        return Run.of_training(self.out, self.model, self.cfg, self.scene, self.step, self.device)

    def evaluate(self, split: str = "test", every: int = 1, with_lpips: bool = True, write: bool = True,
                 progress: bool = False) -> dict:
        """Render every `every`-th view of `split` and score it as a loaded run does (`Run.evaluate` of `as_run`,
        with a bar when `progress`); written into the run folder (eval.json, eval_SPLIT.json for other splits) when
        `write`."""
        release_freed_memory()  # what training steps kept would stay resident beside the renders' own
        result = self.as_run().evaluate(split=split, every=every, with_lpips=with_lpips, progress=progress)
        if write:
            write_scores(result, self.out)
        return result


class MetricsLogger:
    """Training metrics to metrics.jsonl and metrics.csv, and to TensorBoard when it is installed."""

    def __init__(self, out: Path, append: bool):
        mode = "a" if append else "w"
        self.jsonl = open(out / "metrics.jsonl", mode)
        self.csv = open(out / "metrics.csv", mode)
        self.csv_header_written = append
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tensorboard"))
        except ImportError:
            self.tb = None

    def write(self, row: dict) -> None:
        self.jsonl.write(json.dumps(row) + "\n")
        self.jsonl.flush()
        if not self.csv_header_written:
            self.csv.write(",".join(row) + "\n")
            self.csv_header_written = True
        self.csv.write(",".join(str(v) for v in row.values()) + "\n")
        self.csv.flush()
        if self.tb is not None:
            for k, v in row.items():
                if k != "step":
                    self.tb.add_scalar(k, v, row["step"])

    def close(self) -> None:
        self.jsonl.close()
        self.csv.close()
        if self.tb is not None:
            self.tb.close()


def _to_yaml(data: dict) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)

