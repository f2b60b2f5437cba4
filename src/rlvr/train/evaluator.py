"""What the training loop does around its evaluations: the step-0 probe, the evaluation sets,
the exact evaluation, the weight average swapped in, and the kept best model.

    evaluator = Evaluator(run, generation, run_async)
    evaluator.before_training()          # step 0: the probe, then the first evaluation
    evaluator.after(step)                # every eval_every steps and after the last
    with evaluator.averaged(): ...       # the model holds the weight average (ema_decay)

How a set is played and scored is `rlvr.train.evaluation`; this object only holds what those
functions share across a run (the sets, the client, the log, the kept best) so that the loop
calls one method per evaluation. Every rank calls every method: the sets are split over the
processes, and a sharded model's weights gather on every rank.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from rlvr.errors import UsageError
from rlvr.train.best import KeepBest
from rlvr.train.evaluation import (
    eval_metrics,
    evaluate,
    evaluate_exact,
    exact_line,
    exact_metrics,
    save_eval,
    save_exact,
)
from rlvr.train.generation import Generation
from rlvr.train.model import export_final, settle_export
from rlvr.train.probe import collapse_warning, compare, probe, probe_set
from rlvr.train.run import Run
from rlvr.train.session import RunAsync
from rlvr.train.sharding import full_state_dict, full_weights


class Evaluator:
    """Evaluations, the probe and keep-best of one run (see the module)."""

    def __init__(self, run: Run, generation: Generation, run_async: RunAsync[Any]) -> None:
        self.run, self.generation, self.run_async = run, generation, run_async
        cfg = run.cfg
        self.keep: KeepBest | None = None
        if cfg.eval.keep_best and run.dist.main:
            settle_export(run.run_dir / "best")  # a kill between its renames: the kept model back in place
            self.keep = KeepBest(cfg.eval.keep_best, run.run_dir / "best")

    def due(self, step: int) -> bool:
        """Whether to evaluate after `step` steps: every eval_every steps, and after the last."""
        every = self.run.cfg.eval.every
        return every is not None and (step % every == 0 or step == self.run.cfg.steps)

    def before_training(self) -> None:
        """At step 0: the probe (does sampling break the model?), then the first evaluation."""
        if self.run.cfg.eval.probe_tasks:
            self.probe()
        if self.run.cfg.eval.every is not None:
            self.after(0)

    def probe(self) -> None:
        """Greedy against sampled play of a few tasks, before any compute is spent; rank 0 logs
        it and warns (even under -q: it is the most expensive mistake to miss)."""
        run, cfg = self.run, self.run.cfg
        played_by = probe_set(run.env, cfg.eval.probe_tasks, cfg.env_args, rank=run.dist.rank, world=run.dist.world)
        with full_weights(run.model):
            greedy, sampled = self.run_async(probe(played_by, self.generation.client, run.sampling))
        found = compare(run.env, run.dist.gather(greedy), run.dist.gather(sampled), cfg.temperature)
        if run.log is not None:
            run.log.write(0, found.metrics())
            warning = collapse_warning(found)
            if warning is not None:
                print(warning, file=sys.stderr, flush=True)

    def averaged(self) -> contextlib.ExitStack:
        """Inside: the model holds the weight average (ema_decay), if the run keeps one."""
        stack = contextlib.ExitStack()
        if self.run.average is not None:
            stack.callback(self.generation.weights_changed)  # (last: after the weights are back)
            stack.enter_context(self.run.average.swapped_in())
            self.generation.weights_changed()
        return stack

    def after(self, step: int) -> None:
        """Evaluate the model (its weight average, if kept) after `step` steps; keep it if best."""
        with self.averaged():
            with full_weights(self.run.model):  # sharded: gathered whole (rank 0's exact evaluation too)
                metrics = self._play_and_log(step)
            if self.run.cfg.eval.keep_best:
                self._keep_if_best(step, metrics)

    def _play_and_log(self, step: int) -> dict[str, float] | None:
        """Play the evaluation sets; rank 0 saves their rollouts, logs and prints them, and
        returns their metrics (other ranks: None)."""
        run, cfg, client = self.run, self.run.cfg, self.generation.client
        t0 = time.monotonic()
        sampling = (
            run.sampling if cfg.eval.temperature is None else run.sampling.replace(temperature=cfg.eval.temperature)
        )
        played = {k: run.dist.gather(r) for k, r in self.run_async(evaluate(run.sets, client, sampling)).items()}
        if run.log is None:
            return None
        where = run.run_dir / "eval" / f"step_{step:06d}"
        for s in run.sets:
            save_eval(where / s.label, played[s.label], env=cfg.env, env_args=s.env_args, model=cfg.model, step=step)
        metrics, table = eval_metrics(run.sets, played)
        if cfg.eval.exact:  # rank 0 alone: the tree is small, and its result is exact
            exact = self.run_async(evaluate_exact(run.env, client, run.sampling))
            metrics.update(exact_metrics(exact))
            save_exact(where / "exact", exact, env=cfg.env, env_args=cfg.env_args, model=cfg.model, step=step)
            table += "\n" + exact_line(exact)
        run.log.write(step, {**metrics, "time/eval": time.monotonic() - t0})
        run.log.write_text(step, "eval", table.replace("\n", "  \n"))
        run.log.plot_async()
        of = f" (weight average, ema_decay {cfg.ema_decay})" if run.average is not None else ""
        run.say(f"evaluation at step {step}{of}:\n{table}")
        return metrics

    def _keep_if_best(self, step: int, metrics: dict[str, float] | None) -> None:
        """Every rank: export the model to RUN_DIR/best when rank 0 finds `metrics` best."""
        run, keep = self.run, self.keep
        best, problem = False, None
        if keep is not None and metrics is not None:  # rank 0
            try:
                best = keep.better(metrics)
            except UsageError as exc:  # e.g. a metric no evaluation logs
                problem = exc
        if run.dist.max(int(problem is not None)):  # every rank stops, none waits on the others
            raise problem or UsageError("keep_best failed on process 0 (its error says why)")
        if run.dist.max(int(best)):  # every rank: a sharded model's weights gather
            weights = full_state_dict(run.model)
            if keep is not None and metrics is not None:  # rank 0, which found it best
                record = keep.record(step, metrics)
                export_final(run.model, run.tokenizer, run.run_dir / "best", state_dict=weights, extra=record)
