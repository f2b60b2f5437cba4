"""Training config (TOML, flags, validation), token sequences and micro-batch scaling, metrics log."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import warnings

import pytest

from rlvr.cli import main
from rlvr.errors import UsageError
from rlvr.train.config import TrainConfig, check_resume, field_docs, load_config
from rlvr.train.loss_specs import SPECS
from rlvr.types import Completion, Rollout, Turn

BASE = {"env": "e", "model": "m"}


# ---- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"batch_size": 10, "group_size": 4},
            "batch_size (10) must be divisible by group_size (4)",
        ),
        (
            {"batch_size": 32, "group_size": 8, "num_buckets": 8},
            "num_buckets (8) is larger than the tasks in a batch",
        ),
        ({"batch_size": 48, "group_size": 8, "num_buckets": 4}, "must be a multiple of num_buckets (4)"),
        ({"loss": "ppo"}, "unknown loss 'ppo'; expected one of grpo, dr_grpo, dapo, cispo, gspo"),
        ({"group_size": 1, "batch_size": 8}, "group_size must be >= 2"),
        ({"temperature": 0.0}, "temperature must be a finite number > 0"),
        ({"lr": -1e-5}, "lr must be > 0"),
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"max_turns": 0}, "max_turns must be >= 1 or None"),
        ({"micro_batch_tokens": 0}, "micro_batch_tokens must be >= 1 (or unset), got 0"),
        ({"lr_schedule": "step"}, "unknown lr_schedule 'step'"),
        ({"minibatches": 3}, "minibatches (3) must divide the tasks in a batch (32)"),
        ({"lora_alpha": 16.0}, "lora_alpha is set but lora_rank is 0"),
        ({"steps": "10"}, "steps must be an integer, got '10'"),
        ({"eval_env_args": {"opponent": "random"}}, "eval_env_args must be list[dict[str, Any]]"),
    ],
)
def test_bad_config_values_raise_usage_errors(changes, message) -> None:
    with pytest.raises(UsageError) as err:
        TrainConfig(**{**BASE, **changes})
    assert message in str(err.value)


def test_toml_file_and_flags_merge(tmp_path) -> None:
    path = tmp_path / "train.toml"
    path.write_text(
        'env = "tictactoe"\nmodel = "m"\nbatch_size = 64\nlr = 1\n'
        "env_args = {min_random_move_prob = 0.2}\n"
        '[eval]\nenv_args = [{opponent = "random"}, {opponent = "optimal"}]\n'
    )
    cfg = load_config(path, batch_size=128, eval_every=None)
    assert (cfg.batch_size, cfg.lr, cfg.eval_every) == (128, 1.0, None)  # flags win; int lr -> float
    assert cfg.eval_sets == [
        {"min_random_move_prob": 0.2, "opponent": "random"},
        {"min_random_move_prob": 0.2, "opponent": "optimal"},
    ]
    path.write_text('env = "x"\nmodel = "m"\nbatch_sise = 64\n')
    with pytest.raises(UsageError, match="unknown config field 'batch_sise'; valid fields: env, model"):
        load_config(path)
    path.write_text("env = [")
    with pytest.raises(UsageError, match="is not valid TOML"):
        load_config(path)


def test_old_field_names_still_work_with_a_deprecation_note(tmp_path, monkeypatch, capsys) -> None:
    path = tmp_path / "old.toml"
    path.write_text('env = "e"\nmodel = "m"\nbatch_size = 32\nrollouts_per_example = 4\nnum_groups = 2\n')
    with pytest.warns(DeprecationWarning) as caught:
        cfg = load_config(path)
    assert (cfg.group_size, cfg.num_buckets) == (4, 2)
    assert [str(w.message) for w in caught] == [
        f"{path}: rollouts_per_example is deprecated; use group_size (same meaning)",
        f"{path}: num_groups is deprecated; use num_buckets (same meaning)",
    ]
    with pytest.warns(DeprecationWarning) as caught:
        cfg = load_config(path, num_groups=4, group_size=8)  # flags override the file, old name or new
    assert (cfg.group_size, cfg.num_buckets) == (8, 4)
    assert "--num-groups is deprecated; use --num-buckets (same meaning)" in str(caught[-1].message)
    with pytest.raises(UsageError, match="flags: give group_size or rollouts_per_example"):
        load_config(None, env="e", model="m", group_size=4, rollouts_per_example=4)
    # a run started under the old names resumes under the new ones
    saved = {**TrainConfig(**BASE).to_dict(), "rollouts_per_example": 8}
    del saved["group_size"]
    check_resume(saved, TrainConfig(**BASE))
    with pytest.raises(UsageError, match="cannot resume: group_size was 8"):
        check_resume(saved, TrainConfig(**BASE, group_size=4, batch_size=256))
    # on the command line: one note on stderr, and the run goes on
    from rlvr.train import grpo

    seen = {}
    monkeypatch.setattr(grpo, "train", lambda cfg, **kw: seen.update(cfg=cfg))
    assert main(["train", "tictactoe", "-m", "m", "--rollouts-per-example", "4", "--num-groups", "8"]) == 0
    assert (seen["cfg"].group_size, seen["cfg"].num_buckets) == (4, 8)
    notes = capsys.readouterr().err.splitlines()
    assert notes == [
        "rlvr train: note: --rollouts-per-example is deprecated; use --group-size (same meaning)",
        "rlvr train: note: --num-groups is deprecated; use --num-buckets (same meaning)",
    ]


def test_every_field_has_a_one_line_docstring_and_the_core_stays_small() -> None:
    import dataclasses

    from rlvr.train.config import FLAT, SECTIONS

    docs = field_docs()
    core = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in SECTIONS]
    assert list(docs) == core + list(FLAT)
    assert all(docs.values()) and max(len(d) for d in docs.values()) <= 100
    assert len(core) <= 25 and set(SECTIONS) == {"objective", "restarts", "eval", "generation", "compute", "lora"}


FLAT_CASES = {
    "restart_frac": 0.5,
    "restart_below": 0.25,
    "restart_points": "all",
    "restart_greedy": 2,
    "restart_unsure": 0.1,
    "restart_explore": 1,  # (local generation only: the vLLM fields are the other case)
    "restart_explore_weight": 0.5,
    "eval_every": 10,
    "eval_tasks": 7,
    "eval_env_args": [{"opponent": "random"}],
    "eval_exact": True,
    "eval_temperature": 0.5,
    "keep_best": "max:reward/mean",
    "probe_tasks": 3,
    "clip_eps": 0.3,
    "clip_eps_high": 0.28,
    "max_is_weight": 2.0,
    "scale_std": True,
    "mask_truncated": True,
    "turn_credit": 0.5,
    "sharpen": 0.1,
    "device": "cpu",
    "sharding": "ddp",
    "micro_batch_size": 3,
    "micro_batch_tokens": 4096,
    "bf16": False,
    "pack_sequences": False,
    "gradient_checkpointing": True,
    "compile_blocks": True,
    "lora_rank": 4,
    "lora_alpha": 8.0,
    "compile_decode": True,
    "overlap": True,
}
ON_A_SERVER = {"vllm_url": "http://localhost:8000", "weight_sync": "lora", "lora_rank": 4}


def _toml(value) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return (
            "[" + ", ".join("{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items()) + "}" for d in value) + "]"
        )
    return json.dumps(value)


@pytest.mark.parametrize("cases", [FLAT_CASES, ON_A_SERVER])
def test_every_old_flat_name_still_works_as_toml_key_flag_keyword_and_attribute(cases, tmp_path, monkeypatch) -> None:
    from rlvr.train.config import FLAT

    assert set(FLAT_CASES) | set(ON_A_SERVER) == set(FLAT)  # every flat name is tried
    # a TOML file of the old flat layout: each key lands in its section, with a note naming the table
    path = tmp_path / "old.toml"
    path.write_text('env = "e"\nmodel = "m"\n' + "".join(f"{k} = {_toml(v)}\n" for k, v in cases.items()))
    with pytest.warns(DeprecationWarning) as caught:
        from_file = load_config(path)
    old, (section, field) = next(iter(cases.items()))[0], FLAT[next(iter(cases))]
    assert str(caught[0].message) == f"{path}: {old} is deprecated; use {field} in its [{section}] table (same meaning)"
    assert len(caught) == len(cases)
    for name, value in cases.items():
        section, field = FLAT[name]
        assert getattr(getattr(from_file, section), field) == value, name
        assert getattr(from_file, name) == value, name  # the flat attribute reads the section
    # the same names as Python keywords, silently
    assert TrainConfig(**BASE, **cases) == from_file
    # and as flags, silently
    from rlvr.train import grpo

    seen: list = []
    monkeypatch.setattr(grpo, "train", lambda cfg, **kw: seen.append(cfg))
    argv = ["train", "e", "-m", "m"]
    for name, value in cases.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool) and name not in ("scale_std", "pack_sequences"):  # (those two take a value)
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [
                flag,
                json.dumps(value)
                if isinstance(value, list)
                else str(value).lower()
                if isinstance(value, bool)
                else str(value),
            ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(argv) == 0
    assert seen == [from_file]


def test_sections_as_toml_tables_and_flags_on_top(tmp_path) -> None:
    path = tmp_path / "new.toml"
    path.write_text('env = "e"\nmodel = "m"\n[restarts]\nfrac = 0.5\nbelow = 0.2\n[lora]\nrank = 4\n')
    cfg = load_config(path, restart_below=0.3)  # a flag overrides one field of the table
    assert (cfg.restarts.frac, cfg.restarts.below, cfg.lora.rank, cfg.sync) == (0.5, 0.3, 4, "lora")
    path.write_text('env = "e"\nmodel = "m"\n[restarts]\nfrak = 0.5\n')
    with pytest.raises(UsageError, match="unknown field 'frak' in \\[restarts\\]; valid fields: below, explore"):
        load_config(path)
    path.write_text('env = "e"\nmodel = "m"\nrestart_frac = 0.5\n[restarts]\nfrac = 0.5\n')
    with (
        pytest.raises(UsageError, match="give restart_frac or frac in \\[restarts\\], not both"),
        pytest.warns(DeprecationWarning),
    ):
        load_config(path)
    with pytest.raises(UsageError, match="restart_frac must be a number, got 'x'"):
        TrainConfig(**BASE, restarts={"frac": "x"})


def test_unsupported_pairs_are_refused_from_one_table() -> None:
    from rlvr.train.config import UNSUPPORTED

    values = {"restarts.explore": {"restart_explore": 1, "restart_frac": 0.5}, "ema_decay": {"ema_decay": 0.5}}
    values |= {"generation.vllm_url": {"vllm_url": "http://x"}, "compute.fsdp": {"sharding": "fsdp"}}
    values |= {"lora.rank": {"lora_rank": 4, "weight_sync": "lora"}, "compute.compile_blocks": {"compile_blocks": True}}
    values |= {"generation.compile_decode": {"compile_decode": True}, "generation.overlap": {"overlap": True}}
    for a, b, message in UNSUPPORTED:
        TrainConfig(**BASE, **{k: v for k, v in values[a].items() if k != "weight_sync"})  # alone: fine
        both = {**values[a], **values[b]}
        if "vllm_url" not in both:
            both.pop("weight_sync", None)
        with pytest.raises(UsageError) as err:
            TrainConfig(**BASE, **both)
        assert str(err.value) == message, (a, b)


def test_a_run_saved_in_the_old_flat_layout_resumes() -> None:
    from rlvr.train.config import flat

    new = TrainConfig(**BASE, restart_frac=0.5, eval_every=10)
    saved = flat(new.to_dict())  # the old layout: every field at top level
    assert saved["restart_frac"] == 0.5 and "restarts" not in saved
    check_resume(saved, new)
    check_resume(new.to_dict(), TrainConfig(**BASE, restart_frac=0.5, eval_every=20))  # may change
    with pytest.raises(UsageError, match="cannot resume: restart_frac was 0.5 when the run started, now 0.25"):
        check_resume(saved, TrainConfig(**BASE, restart_frac=0.25, eval_every=10))


def test_std_scaling_comes_from_the_loss_unless_set() -> None:
    assert TrainConfig(**BASE, loss="dr_grpo").advantage_std_scaling is False
    assert TrainConfig(**BASE, loss="grpo").advantage_std_scaling is True
    assert TrainConfig(**BASE, loss="dr_grpo", scale_std=True).advantage_std_scaling is True


def test_resume_may_change_steps_but_not_the_algorithm() -> None:
    saved = TrainConfig(**BASE).to_dict()
    check_resume(saved, TrainConfig(**BASE, steps=500, eval_every=10))
    with pytest.raises(UsageError, match="cannot resume: lr was 3e-05 when the run started, now 0.001"):
        check_resume(saved, TrainConfig(**BASE, lr=1e-3))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["train", "tictactoe", "--model", "m", "--batch-size", "10", "--group-size", "4"],
            "batch_size (10) must be divisible by group_size (4)",
        ),
        (["train", "tictactoe", "--model", "m", "--loss", "reinforce"], "unknown loss 'reinforce'"),
        (
            [
                "train",
                "tictactoe",
                "--model",
                "m",
                "--batch-size",
                "16",
                "--group-size",
                "8",
                "--num-buckets",
                "4",
            ],
            "num_buckets (4) is larger than the tasks in a batch",
        ),
        (["train", "tictactoe"], "'model' is required"),
        (["train", "--model", "m"], "'env' is required"),
        (["train", "tictactoe", "--model", "m", "--config", "/nonexistent.toml"], "does not exist"),
    ],
)
def test_cli_rejects_bad_config_with_one_line(capsys, argv, expected) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1 and expected in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_cli_flags_parse_json_none_and_booleans(monkeypatch) -> None:
    seen = {}
    from rlvr.train import grpo

    monkeypatch.setattr(grpo, "train", lambda cfg, **kw: seen.update(cfg=cfg, **kw))
    argv = [
        "train",
        "tictactoe",
        "-m",
        "m",
        "--eval-every",
        "none",
        "--bf16",
        "--scale-std",
        "false",
        "--eval-env-args",
        '[{"opponent": "random"}]',
        "--resume",
    ]
    assert main(argv) == 0
    cfg = seen["cfg"]
    assert (cfg.eval_every, cfg.bf16, cfg.scale_std, cfg.eval_env_args, seen["resume"]) == (
        None,
        True,
        False,
        [{"opponent": "random"}],
        True,
    )


def test_train_takes_the_short_flags_of_the_other_commands_and_the_long_ones_still_work(monkeypatch) -> None:
    from rlvr.cli import build_parser
    from rlvr.train import grpo

    seen: list = []
    monkeypatch.setattr(grpo, "train", lambda cfg, **kw: seen.append(cfg))
    short = ["-o", "runs/x", "-T", "0.5", "-a", '{"opponent": "random"}', "-t", "64", "--device", "cpu"]
    long = ["--output-dir", "runs/x", "--temperature", "0.5", "--env-args", '{"opponent": "random"}']
    long += ["--max-tokens", "64", "--device", "cpu"]
    for flags in (short, long):
        assert main(["train", "tictactoe", "-m", "m", *flags]) == 0
    assert seen[0] == seen[1]
    assert (seen[0].output_dir, seen[0].temperature, seen[0].env_args, seen[0].max_tokens, seen[0].device) == (
        "runs/x",
        0.5,
        {"opponent": "random"},
        64,
        "cpu",
    )
    # the same letter means the same thing in eval and sft
    parser = build_parser()
    evaluated = parser.parse_args(["eval", "e", "-T", "0.5", "-a", "{}", "-o", "d"])
    assert (evaluated.temperature, evaluated.env_args, evaluated.output) == (0.5, "{}", "d")
    tuned = parser.parse_args(["sft", "-m", "m", "-d", "f", "-o", "d", "--device", "cpu"])
    assert (tuned.output_dir, tuned.device) == ("d", "cpu")
    assert parser.parse_args(["eval", "e", "-t", "64"]).max_tokens == 64


def test_train_help_shows_short_flags_one_default_and_refuses_prefixes(capsys) -> None:
    import re

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    usage = text.split("\n\n")[0]
    for short in ("-m PATH", "-o DIR", "-a JSON", "-T X", "-t N"):
        assert short in usage, short
    assert re.search(r"run directory: metrics, plots, checkpoints\s+\(default\s+runs/train/ENV--MODEL\)", text)
    assert "(default: unset)" not in text.split("--output-dir DIR")[1].split("--env-args")[0]
    assert "[restarts] (TOML table)" in text and "--restart-below" in text
    assert main(["train", "e", "-m", "m", "--temp", "0.5"]) == 2  # no prefix abbreviations
    assert "unrecognized arguments: --temp" in capsys.readouterr().err


def test_train_device_is_checked_before_anything_loads() -> None:
    pytest.importorskip("torch")
    from rlvr.train.distributed import _pick_device

    assert str(_pick_device("cpu", local=0, world=1)) == "cpu"
    with pytest.raises(UsageError, match="device must be cpu, cuda or cuda:N, got 'gpu0'"):
        _pick_device("gpu0", local=0, world=1)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="torch sees no CUDA device; pass --device cpu"):
            _pick_device("cuda", local=0, world=1)


# ---- token sequences ----------------------------------------------------------------------


def _turn(prompt: list[int], sampled: list[int], reply: str = "ok") -> Turn:
    logprobs = [-0.5] * len(sampled)
    return Turn(
        Completion(text="x", token_ids=sampled, logprobs=logprobs, prompt_token_ids=prompt),
        [{"role": "user", "content": reply}],
    )


def test_sequences_follow_sampled_ids_and_mask_only_them() -> None:
    from rlvr.train.sequences import build_sequences, rollout_sequences

    # turn 2's prompt extends turn 1's prompt + sampled ids: one sequence, env ids masked
    r = Rollout("t", 0, 0, [], turns=[_turn([1, 2, 3], [7, 8]), _turn([1, 2, 3, 7, 8, 4, 5], [9])])
    [(ids, mask, lps, owner)] = rollout_sequences(r)
    assert ids == [1, 2, 3, 7, 8, 4, 5, 9]
    assert mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert owner == [-1, -1, -1, 0, 0, -1, -1, 1]  # the model turn that sampled each id
    assert [x for x in lps if not math.isnan(x)] == [-0.5, -0.5, -0.5]
    # the template re-tokenised the first reply (7, 8 -> 78): a new sequence from turn 2's prompt
    r = Rollout("t", 0, 0, [], turns=[_turn([1, 2, 3], [7, 8]), _turn([1, 2, 3, 78, 4, 5], [9, 10])])
    first, second = rollout_sequences(r)
    assert first[:2] == ([1, 2, 3, 7, 8], [0, 0, 0, 1, 1])
    assert second[:2] == ([1, 2, 3, 78, 4, 5, 9, 10], [0, 0, 0, 0, 0, 0, 1, 1])
    assert (first[3], second[3]) == ([-1, -1, -1, 0, 0], [-1] * 6 + [1, 1])
    # turn credit: each sampled id takes its own turn's advantage, the rest 0
    [a, b], split = build_sequences([r], [[0.5, -2.0]], [True])
    assert split == 1 and (a.token_adv, b.token_adv) == ([0, 0, 0, 0.5, 0.5], [0.0] * 6 + [-2.0, -2.0])
    assert not a.zero_advantage and not b.zero_advantage
    [c, d], _ = build_sequences([r], [[0.0, 0.0]], [True])  # turn advantages all 0: skippable
    assert c.zero_advantage and d.zero_advantage


def test_rollout_without_token_ids_is_refused() -> None:
    from rlvr.train.sequences import rollout_sequences

    r = Rollout("t", 0, 0, [], turns=[Turn(Completion(text="hi"))])
    with pytest.raises(UsageError, match="has no token ids; training needs a backend"):
        rollout_sequences(r)


def test_advantages_fill_failed_rollouts_and_dapo_drops_uniform_groups() -> None:
    from rlvr.train.advantages import batch_advantages

    def ro(reward: float, error: str | None = None, truncated: bool = False) -> Rollout:
        return Rollout("t", 0, 0, [], reward=reward, error=error, truncated=truncated)

    batch = [
        ro(1.0),
        ro(0.0),
        ro(0.0, error="EnvError: boom"),
        ro(0.5, truncated=True),
        ro(1.0),
        ro(1.0),
        ro(1.0),
        ro(1.0),
    ]
    adv, trainable, kept = batch_advantages(batch, 4, scale_std=False, mask_truncated=True, drop_uniform=False)
    # group 1: mean of scored (1, 0, 0.5) = 0.5; the failed one gets exactly 0 advantage
    assert adv[:4] == pytest.approx([0.5, -0.5, 0.0, 0.0]) and adv[4:] == [0.0] * 4
    assert trainable == [True, True, False, False, True, True, True, True] and kept == 1.0
    dapo = TrainConfig(**BASE, loss="dapo")
    _, trainable, kept = batch_advantages(
        batch, 4, scale_std=True, mask_truncated=False, drop_uniform=dapo.loss_spec.drop_uniform_groups
    )
    assert trainable[4:] == [False] * 4 and trainable[3] and kept == 0.5


# ---- micro-batches add up to the whole batch ------------------------------------------------


@pytest.mark.parametrize("loss_name", list(SPECS))
def test_micro_batch_gradients_sum_to_the_full_batch_gradient(loss_name) -> None:
    torch = pytest.importorskip("torch")
    from rlvr.train.losses import LOSSES, LossConfig
    from rlvr.train.sequences import TrainSequence, micro_batches, normaliser

    gen = torch.Generator().manual_seed(0)
    seqs = []
    for i, n in enumerate((9, 4, 7, 3, 6)):
        ids = torch.randint(0, 16, (n,), generator=gen).tolist()
        mask = [0, 0] + [int(j % 3 != 0) for j in range(n - 2)]
        seqs.append(TrainSequence(ids, mask, float(i) - 2.0, [math.nan] * n, i))
    table = torch.randn(16, 16, generator=gen)
    cfg = LossConfig(norm_len=12, kl_coef=0.1)

    def grad(size: int) -> torch.Tensor:
        w = table.clone().requires_grad_(True)
        plan = micro_batches(seqs, size, 0, torch.device("cpu"))
        kind = SPECS[loss_name].normalisation
        total = sum(normaliser(kind, mb.mask) for mb in plan)
        for mb in plan:
            logp = torch.log_softmax(w[mb.ids[:, :-1]], -1).gather(-1, mb.ids[:, 1:, None]).squeeze(-1)
            old = logp.detach() + 0.3 * torch.sin(1.7 * mb.ids[:, 1:])  # per token: some get clipped
            ref = logp.detach() - 0.1
            loss, _ = LOSSES[loss_name](logp, old, mb.adv, mb.mask, cfg, ref_logp=ref)
            (loss * normaliser(kind, mb.mask) / total).backward()
        return w.grad

    whole, parts = grad(len(seqs)), grad(2)
    assert whole.abs().sum() > 0
    torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-7)


# ---- metrics log ------------------------------------------------------------------------------


def test_metrics_log_widens_csv_and_resume_drops_later_rows(tmp_path) -> None:
    from rlvr.train.logging import MetricsLog

    log = MetricsLog(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        log.write(step, {"reward/mean": step / 10})
    log.write(3, {"eval/opponent=random/win_pct": 40.0})  # joins step 3's row
    assert {p.name for p in log.plot()} >= {"reward.png", "eval_opponent=random.png", "overview.png"}
    (tmp_path / "plots" / "reward.png").unlink()
    log.plot_async()
    log.wait_plots()  # the child process redrew it from metrics.csv
    assert (tmp_path / "plots" / "reward.png").stat().st_size > 1000
    rows = list(csv.DictReader((tmp_path / "metrics.csv").read_text().splitlines()))
    assert [r["step"] for r in rows] == ["1.0", "2.0", "3.0"]
    assert rows[2]["eval/opponent=random/win_pct"] == "40.0" and rows[0]["eval/opponent=random/win_pct"] == ""
    resumed = MetricsLog(tmp_path, resume_step=2, tensorboard=False)
    resumed.write(3, {"reward/mean": 0.9})
    rows = list(csv.DictReader((tmp_path / "metrics.csv").read_text().splitlines()))
    assert [(r["step"], r["reward/mean"]) for r in rows] == [("1.0", "0.1"), ("2.0", "0.2"), ("3.0", "0.9")]


def test_lr_schedules() -> None:
    pytest.importorskip("torch")
    from rlvr.train.model import lr_factor

    def factors(schedule: str) -> list[float]:
        return [round(lr_factor(s, schedule=schedule, warmup=2, total=10), 3) for s in (0, 1, 2, 7, 9)]

    assert factors("cosine") == [0.5, 1.0, 1.0, 0.309, 0.038]
    assert factors("linear") == [0.5, 1.0, 1.0, 0.375, 0.125]
    assert factors("constant") == [0.5, 1.0, 1.0, 1.0, 1.0]
    assert lr_factor(5, schedule="constant", warmup=0, total=10) == 1.0


def test_default_output_dir_names_the_env_and_the_model() -> None:
    pytest.importorskip("torch")
    from rlvr.train.checkpoint import default_output_dir

    assert default_output_dir("tictactoe", "runs/sft/small/final") == ("runs/train/tictactoe--small-final")
    assert default_output_dir("x", "Qwen/Qwen3-0.6B") == "runs/train/x--Qwen3-0.6B"


def test_sft_and_train_share_the_bf16_and_lr_schedule_flags_and_defaults(monkeypatch) -> None:
    """Issue 19: the same concept gets the same flag and default everywhere."""
    from rlvr.cli import main
    from rlvr.train import grpo, sft_config
    from rlvr.train.config import field_docs as train_docs
    from rlvr.train.sft_config import SFTConfig

    train = TrainConfig(env="e", model="m")
    sft = SFTConfig(model="m", data="d", output_dir="o")
    assert (train.bf16, train.lr_schedule) == (sft.bf16, sft.lr_schedule) == (None, "constant")
    assert train_docs()["lr_schedule"] == sft_config.field_docs()["lr_schedule"]
    assert train_docs()["bf16"].startswith("bfloat16 autocast of ")  # (sft's may say more: train's is one line)
    assert train_docs()["bf16"].split("; ")[1] in sft_config.field_docs()["bf16"]
    seen: list = []
    monkeypatch.setattr(grpo, "train", lambda cfg, **kw: seen.append(cfg))
    for flag, value in (("--bf16", True), ("--no-bf16", False)):
        assert main(["train", "e", "-m", "m", flag]) == 0
        assert seen[-1].bf16 is value
    assert main(["train", "e", "-m", "m"]) == 0 and seen[-1].bf16 is None


def test_bf16_unset_is_off_on_a_cpu_and_a_given_value_stands() -> None:
    torch = pytest.importorskip("torch")
    from rlvr.train.model import use_bf16

    cpu = torch.device("cpu")
    assert (use_bf16(None, cpu), use_bf16(True, cpu), use_bf16(False, cpu)) == (False, True, False)


def test_a_flat_name_sets_its_section_and_copies_keep_their_own_sections() -> None:
    cfg = TrainConfig("tictactoe", "m")
    cfg.eval_every = 7  # the flat spelling writes the section's field, not a shadow attribute
    assert cfg.eval.every == 7 and "eval_every" not in vars(cfg)
    copy = dataclasses.replace(cfg, steps=3)
    copy.restarts.frac = 0.25
    assert cfg.restarts.frac != 0.25 and copy.eval.every == 7
