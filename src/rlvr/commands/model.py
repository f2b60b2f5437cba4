"""`rlvr model new`: build a small causal LM from scratch (random weights, a tokenizer trained on
text the named environments produce), saved in Hugging Face format.

The tokenizer learns from each environment's prompts and from games its reference players
play, so board renderings, tags and replies tokenise compactly. The folder loads with
`AutoModelForCausalLM.from_pretrained(DIR)` like any hub model.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError, cannot_write


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "model",
        help="build tiny models for offline work",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    msub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    new = msub.add_parser("new", help="build a randomly initialised model and its tokenizer", description=__doc__)
    new.add_argument("--preset", choices=["tiny", "small"], default="tiny", help="model size (default tiny)")
    new.add_argument(
        "--corpus",
        nargs="*",
        default=[],
        metavar="ENV",
        help="environments whose text trains the tokenizer (default: a generic corpus)",
    )
    new.add_argument("--games", type=int, default=200, help="episodes per reference player per env for the corpus")
    new.add_argument("--seed", type=int, default=0, help="seed of the weights and the corpus")
    new.add_argument("--vocab-size", type=int, default=None, help="upper bound on the vocabulary")
    new.add_argument("-o", "--output", required=True, metavar="DIR", help="where to save the model")
    new.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    new.set_defaults(run=run)


def env_corpus(name: str, games: int, seed: int) -> list[str]:
    """Every message text of `games` episodes of each reference player of env `name`."""
    from rlvr.engine import run_rollouts
    from rlvr.registry import load_environment

    env = load_environment(name, seed=seed) if _takes_seed(name) else load_environment(name)
    tasks = env.tasks("train")[:games]
    texts: list[str] = [env.system_prompt or ""]
    for make in env.policies().values():
        rollouts = asyncio.run(run_rollouts(env, make(), tasks, rollouts_per_task=1, concurrency=64))
        for r in rollouts:
            texts.extend(str(m.get("content") or "") for m in r.messages)
    return [t for t in texts if t]


def _takes_seed(name: str) -> bool:
    import inspect
    from importlib.metadata import entry_points

    eps = {ep.name: ep for ep in entry_points(group="rlvr.environments")}
    return name in eps and "seed" in inspect.signature(eps[name].load()).parameters


def run(args: argparse.Namespace) -> int:
    try:
        from rlvr.models import build_tiny_model, count_parameters, default_corpus
    except ImportError as exc:
        raise UsageError(f"building models needs the train extra: pip install 'rlvr[train]' ({exc})") from None
    if args.games < 1:
        raise UsageError(f"--games must be positive, got {args.games}")
    out = Path(args.output)
    try:  # before any work: a file in the way or no permission is one line, at once
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(cannot_write(out, exc)) from None
    corpus = list(default_corpus())
    for name in args.corpus:
        corpus.extend(env_corpus(name, args.games, args.seed))
    path = build_tiny_model(out, preset=args.preset, corpus=corpus, seed=args.seed, vocab_size=args.vocab_size)
    if args.quiet:
        return 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    print(
        f"saved {args.preset} model to {path}: {count_parameters(model):,} parameters, "
        f"vocabulary {len(tok):,} tokens, corpus {len(corpus):,} texts"
    )
    return 0
