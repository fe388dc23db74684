"""The consolidation loop (``replaybank loop``): one run (one lineage, rehearsal setting and seed),
resumable, and :func:`run_grid` for several runs side by side.

Per generation ``g = 1..G``:

1. **act**: the current model (base + adapter of generation ``g - 1``) attempts
   ``tasks_per_generation`` train tasks, ``samples_per_task`` sampled answers each, with up to
   ``context_examples`` successful episodes retrieved from the store (BM25) in context; each answer
   is cut at the end of its call, its calls validated against the schema, and checked; with
   ``replay_workflows``, a task a stored workflow serves (it passes every check) is first run
   through the environment without the model, and only the others go to the model;
2. **record**: every attempt goes to the store in one transaction (task, context shown, replayed
   ids, step, verdict, generation, adapter hash, seed); with ``replay_workflows``, the
   generation's successes are then abstracted into workflows, stored with their provenance;
3. **consolidate**: the LoRA adapter is trained on the successes of the lineage's generations
   (plus the demonstrations; with ``consolidate = "own"`` the replayed ones left out, with
   ``consolidate = "insights"`` each with the insights retrieved for its task) mixed with
   rehearsal rows, for ``consolidation_steps`` optimizer steps when set, and saved;
4. **evaluate**: greedy answers to held-out tasks without replayed context (is the skill in the
   weights?) and with it, the validation split (ranks generations for ``best``), and the
   general-capability suite (retention against the base model); with ``replay_workflows``, also
   the with-context answers with a replayed workflow wherever one passes its checks (arm
   ``replay``). Every arm counts the model calls (generation turns) it spent, and the model calls
   per solved task.

Generation 0 is the base model measured the same way, after the store is seeded with at most 16
demonstrations, and those of ``[loop] demos_file`` (a person's, checked, with the values of
``[loop] private_fields`` redacted; every attempt recorded and every example kept in
``state.json`` is redacted with the same values). See :mod:`replaybank.llm.loop.state` for what survives a kill. The components
are in :mod:`replaybank.llm.loop` (tasks, act, replay, consolidate, lineage, state, report).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from replaybank.episodic import EpisodeStore, Task
from replaybank.episodic.demos import read_demonstrations, to_episodes
from replaybank.episodic.env import Environment
from replaybank.episodic.redact import Redactor
from replaybank.episodic.retrieval import Retriever
from replaybank.episodic.turns import demonstrate
from replaybank.llm.config import Recipe
from replaybank.llm.config.loop import Loop, LoopConfig
from replaybank.llm.config.names import refuse_links, safe_folder
from replaybank.llm.eval.measure import suite_retention
from replaybank.llm.loop.act import (
    AttemptOptions,
    attempt,
    build_prompts,
    summarise,
    to_episode,
    turn_seed,
)
from replaybank.llm.loop.consolidate import (
    consolidate,
    domain_rows,
    load_adapter,
    rehearsal_rows,
    save_adapter,
)
from replaybank.llm.loop.context import LevelRetriever, level_prompts
from replaybank.llm.loop.lineage import lineage_for, split_heldout
from replaybank.llm.loop.reflect import failed_episodes, retry_pass, store_reflections, unreflected
from replaybank.llm.loop.register import register_generations
from replaybank.llm.loop.replay import learn_workflows, replay_tasks
from replaybank.llm.loop.report import REPORT_FILES, write_report
from replaybank.llm.loop.results import (
    Acted,
    EvalSpeed,
    Evaluation,
    Example,
    GenerationRow,
    ReflectionFigures,
    ReplayArm,
    ResumedAct,
    SuiteFigures,
    VoteArm,
)
from replaybank.llm.loop.state import (
    LoopState,
    check_inputs,
    check_same_run,
    loop_controller,
    new_state,
    read_state,
    write_state,
)
from replaybank.llm.loop.tasks import make_environment
from replaybank.llm.loop.vote import vote_attempts
from replaybank.llm.runtime import pick_device, use_device
from replaybank.workers import worker_pool

Log = Callable[[str], None]
SPLIT_SEED = 7919  # task draws: seed * SPLIT_SEED + generation, so seeds and generations never share a draw
RETRY_TURN = 1000  # the retry pass samples with turn_seed(the generation's seed, RETRY_TURN): a seed no turn of acting uses


def run_loop(
    cfg: LoopConfig, out: Path, *, log: Log = print, env: Environment | None = None, worker: int | None = None,
) -> LoopState:
    """Run (or resume) the loop of ``cfg`` in ``out``; return the final state (what ``state.json`` holds).

    The model loads on ``[training] device`` (bf16 on a GPU, fp32 on CPU); ``worker`` k of a grid
    given a bare ``cuda`` runs on GPU k mod n_gpus.

    Raises:
        ConfigError: ``[training] device`` names a device this machine lacks.
        StateError: ``out`` holds a run with another config, a ``state.json`` that fails its
            checks, or a run whose base model or rehearsal rows changed since it started.
        AdapterError: the adapter to resume from is not the one ``state.json`` recorded.
        UnsafePathError: a symbolic link inside ``out`` where the loop writes (``adapters/genN``).
        CheckerError: the environment's checker raised (naming the checker and task).
        TaskFileError: a malformed task file line (``file:line``).
        StoreError: the store is locked, corrupt or from a newer schema.
        DemoFileError: ``[loop] demos_file`` has a bad line (``file:line`` and field) or lacks a
            field of ``[loop] private_fields``; raised before the store is opened.
    """
    import torch

    from replaybank.llm.eval.decode import model_fingerprint
    from replaybank.llm.eval.suite import load_suite, prepare_suite, sample_suite
    from replaybank.llm.model import cache_dir, load_model
    from replaybank.llm.train import add_lora

    lp, ev = cfg.loop, cfg.evaluation
    recipe = cfg.recipe
    out.mkdir(parents=True, exist_ok=True)
    saved = read_state(out)
    if saved is None:
        state = new_state(cfg.saved_dict())
    else:
        check_same_run(out, saved, cfg)
        state = dataclasses.replace(saved, config=cfg.saved_dict())
    torch.set_num_threads(max(1, cfg.training.num_threads))
    device = pick_device(cfg.training.device, worker, where=f"{cfg.source}: [training] device")  # before the model loads
    use_device(device)
    env = env or make_environment(cfg)
    t_start = time.perf_counter()
    heldout, evaluation, validation = heldout_tasks(env, lp)
    demos = list(env.tasks(lp.demos, split="train", seed=lp.seed * SPLIT_SEED)) if lp.demos else []
    demo_file = read_demonstrations(lp.demos_file) if lp.demos_file else None  # a bad file fails at once
    redactor = demo_file.redactor(lp.private_fields) if demo_file else Redactor()
    imported = to_episodes(demo_file, lp.private_fields)[0] if demo_file else []
    max_calls = max([len(t.expected) for t in heldout + demos] + [len(e.steps) for e in imported] + [1])

    with EpisodeStore(out / "store.db") as store:  # opened first: a bad store fails before the model loads
        base, tok = load_model(cfg.training.base_model, device, log=log)
        training = dataclasses.replace(cfg.training, seed=lp.seed)
        model = add_lora(base, training)
        fingerprint = model_fingerprint(model)  # of the base weights (LoRA left out)
        check_inputs(out, state, base_model=fingerprint, model_name=cfg.training.base_model)  # before any work
        initial = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
        suite = prepare_suite(model, tok, sample_suite(load_suite(), ev.suite_per_family, lp.seed),
                              cache_dir=cache_dir() / "suite", batch_size=ev.generation_batch_size)
        rehearsal, reh_manifest = rehearsal_rows(
            recipe.source[0] if recipe is not None and recipe.source else "none", model, tok, seed=lp.seed, n_rows=cfg.data.self_rows, max_seq_length=training.max_seq_length,
            suite_prompts=[i.prompt for i in suite.items], batch_size=ev.generation_batch_size,
            keep_truncated=cfg.data.self_open_rows,
        )
        check_inputs(out, state, rehearsal=reh_manifest)
        state = dataclasses.replace(state, rehearsal=reh_manifest, base_model=fingerprint,
                                    suite_base={"families": suite.base["families"], "n": suite.base["n"]})
        controller = loop_controller(out, state, recipe, lp.seed)
        if (demos or imported) and not store.episodes(source="demo", limit=1):
            store.add_many([demonstrate(env, t) for t in demos] + imported)
            log(f"store seeded with {len(demos) + len(imported)} demonstrations"
                + (f" ({len(imported)} from {lp.demos_file})" if imported else ""))
        if lp.replay_workflows:  # every start: a kill after the seeding must not lose them (adding again adds nothing)
            learned = learn_workflows(store, generation=None)
            log(f"workflows from the demonstrations: {learned.stored} stored, {learned.not_abstracted} not abstracted")
        if state.finished > 0:
            g = state.finished
            adapter = load_adapter(model, out / "adapters" / f"gen{g}", expected=state.adapter, generation=g)
            log(f"resuming after generation {g} (adapter {adapter})")
        recipe_record = {"name": lp.recipe, **(dataclasses.asdict(recipe) if recipe is not None else {})}

        def register() -> None:
            if lp.library:
                added = register_generations(Path(lp.library), out, state.generations, store, skill=f"tool calls ({lp.tasks})",
                                             base_name=cfg.training.base_model, fingerprint=fingerprint, recipe=recipe_record,
                                             include_replayed=lp.consolidate != "own")
                if added:
                    log(f"registered {', '.join(added)} in the adapter library {lp.library}")

        register()  # generations finished before [loop] library was set (or before a kill)
        if not state.generations:
            measured = evaluate(model, tok, env, store, evaluation, validation, suite, cfg, max_calls, generation=0,
                                redactor=redactor)
            state = state.add(GenerationRow(generation=0, adapter="base", evaluation=measured))
            write_state(out, state)
            log(_line(state.generations[0], lp.generations))
        for g in range(state.finished + 1, lp.generations + 1):
            t0 = time.perf_counter()
            acted = act_generation(model, tok, env, store, cfg, g, state.adapter, max_calls, log, redactor)
            val_scores = [r.evaluation.validation.credit for r in state.generations]
            lineage = lineage_for(g, lp.window, lp.lineage, val_scores)
            if lp.init == "fresh":
                model.load_state_dict(initial, strict=False)
            domain, n_rows = domain_rows(store, tok, lineage, training.max_seq_length, lp.system_prompt,
                                         consolidate=lp.consolidate, levels=lp.retrieve, k=lp.context_examples,
                                         budget=lp.context_chars)
            log(f"gen {g}: consolidating {n_rows} {'own ' if lp.consolidate == 'own' else ''}successes of generations "
                f"{lineage} (+ demos){' with their insights' if lp.consolidate == 'insights' else ''}, "
                f"{_recipe_words(lp.recipe, recipe)}"
                + (f", {lp.consolidation_steps} steps" if lp.consolidation_steps else ""))
            train = consolidate(model, tok.pad_token_id, domain, rehearsal, recipe, training, desc=f"gen {g} consolidate",
                                controller=controller, steps=lp.consolidation_steps)
            adapter = save_adapter(model, safe_folder(out, "adapters", f"gen{g}"),
                                   {"generation": g, "lineage": lineage, "seed": lp.seed, "rows": n_rows,
                                    "base_model": {"fingerprint": fingerprint, "name": cfg.training.base_model},
                                    "recipe": recipe_record})
            measured = evaluate(model, tok, env, store, evaluation, validation, suite, cfg, max_calls, generation=g,
                                redactor=redactor)
            state = state.add(GenerationRow(
                generation=g, adapter=adapter, lineage=lineage, train_rows=n_rows, act=acted, train=train.to_json(),
                evaluation=measured, seconds=round(time.perf_counter() - t0, 1),
            ))
            if controller is not None:  # the next generation starts from it, here or after a kill
                state = dataclasses.replace(state, controller=controller.state_dict())
            write_state(out, state)
            log(_line(state.generations[-1], lp.generations))
            register()  # after state.json: a killed run registers what it missed when it resumes
    state = dataclasses.replace(state, seconds_this_session=round(time.perf_counter() - t_start, 1))
    write_state(out, state)
    return state


def act_generation(
    model: Any, tok: Any, env: Environment, store: EpisodeStore, cfg: LoopConfig, g: int, adapter: str,
    max_calls: int, log: Log, redactor: Redactor | None = None,
) -> Acted | ResumedAct:
    """Attempt this generation's tasks and record them, private values redacted (skipped when the
    store already has them)."""
    redactor = redactor or Redactor()
    lp, ev = cfg.loop, cfg.evaluation
    if g in store.generations():
        recs = store.episodes(generation=[g])
        n = len(recs)
        log(f"gen {g}: attempts already in the store ({n} distinct episodes); not acting again")
        if lp.replay_workflows:  # the kill may have come before they were learned (adding again adds nothing)
            learn_workflows(store, generation=g)
        resumed = ResumedAct(
            resumed=True, n=n, success=sum(r.episode.verdict.success for r in recs) / max(n, 1),
            credit=sum(r.episode.verdict.reward for r in recs) / max(n, 1))
        missing = unreflected(store, g) if lp.reflect else []
        if missing:  # killed between the episodes and their reflections: write the rest (greedy, so the same)
            _, counts = store_reflections(
                model, tok, store, [(r.id, r.episode.task, r.episode.output, r.episode.verdict, r.episode.steps)
                                    for r in missing], generation=g, max_tokens=lp.reflection_max_tokens,
                batch_size=ev.generation_batch_size, desc=f"gen {g} reflect")
            resumed = dataclasses.replace(resumed, reflection=ReflectionFigures(counts))
            log(f"gen {g}: wrote the {counts.n} reflections a kill left out")
        return resumed
    drawn = env.tasks(lp.tasks_per_generation, split="train", seed=lp.seed * SPLIT_SEED + g)
    replays = replay_tasks(env, store, drawn) if lp.replay_workflows else None
    replayed = replays.attempts if replays is not None else {}
    tasks = [t for t in drawn if t.id not in replayed for _ in range(lp.samples_per_task)]
    prompts, shown, pool = context_prompts(store, tasks, lp)
    started = time.time()
    sample_seed = lp.seed * SPLIT_SEED + g
    kw = AttemptOptions(max_new_tokens=ev.max_new_tokens, batch_size=ev.generation_batch_size,
                        temperature=lp.temperature, max_calls=max_calls, max_turns=lp.max_turns)
    generated, stats = attempt(model, tok, env, tasks, prompts, seed=sample_seed, desc=f"gen {g} act", **kw)
    attempts = [*replayed.values(), *generated]
    episodes = [redactor.episode(to_episode(a, generation=g, adapter=adapter, seed=sample_seed, started_at=started))
                for a in attempts]
    log(f"gen {g}: recording {len(episodes)} attempts" + (f" ({len(replayed)} replayed workflows)" if replays else ""))
    ids = store.add_many(episodes)
    acted = Acted(score=summarise(attempts), stats=stats, retrieval_pool=pool["episodes"],
                  shown=None if shown is None else {**shown, "pool": pool})
    if replays is not None:
        acted = dataclasses.replace(acted, replay=replays.counts(), workflows=learn_workflows(store, generation=g))
    if lp.reflect:
        failed = failed_episodes(attempts, ids)
        stored = dict(zip(ids, episodes, strict=True))  # redacted: no private value reaches a reflection
        lessons, counts = store_reflections(
            model, tok, store, [(eid, stored[eid].task, stored[eid].output, stored[eid].verdict, stored[eid].steps)
                                for eid, _ in failed], generation=g, max_tokens=lp.reflection_max_tokens,
            batch_size=ev.generation_batch_size, desc=f"gen {g} reflect", redact=redactor.text)
        retry, _ = retry_pass(model, tok, env, [a for _, a in failed], lessons, seed=turn_seed(sample_seed, RETRY_TURN),
                              desc=f"gen {g} retry", **kw)
        acted = dataclasses.replace(acted, reflection=ReflectionFigures(counts, retry))
        log(f"gen {g}: {counts.n} reflections ({counts.fallback} fallback, {counts.cut} cut); retry exact "
            f"{retry.without.success:.0%} without, {retry.with_reflection.success:.0%} with reflection")
    return acted


def heldout_tasks(env: Environment, lp: Loop) -> tuple[list[Task], list[Task], list[Task]]:
    """Every held-out task of the run (one draw, with the run's seed), then its evaluation and
    validation splits."""
    heldout = list(env.tasks(lp.eval_tasks + lp.validation_tasks, split="heldout", seed=lp.seed))
    evaluation, validation = split_heldout(heldout, lp.eval_tasks)
    return heldout, evaluation, validation


def eval_options(cfg: LoopConfig, max_calls: int) -> AttemptOptions:
    """The generation budget of every evaluation pass (greedy)."""
    return AttemptOptions(max_new_tokens=cfg.evaluation.max_new_tokens, batch_size=cfg.evaluation.generation_batch_size,
                          max_calls=max_calls, max_turns=cfg.loop.max_turns)


def context_prompts(
    store: EpisodeStore, tasks: list[Task], lp: Loop,
) -> tuple[list[tuple[list[dict[str, str]], tuple[int, ...]]], dict[str, int] | None, dict[str, int]]:
    """The prompts of ``tasks`` with the store's experience in context; what was shown (None for
    the default: episodes only, no budget, the prompts of ``build_prompts``); the candidates per level."""
    if list(lp.retrieve) == ["episodes"] and lp.context_chars == 0:
        retriever = Retriever.from_store(store)
        pool = {"episodes": len(retriever), "insights": 0, "workflows": 0}
        return build_prompts(tasks, retriever, lp.context_examples, system=lp.system_prompt), None, pool
    levels = LevelRetriever.from_store(store, lp.retrieve)
    prompts, _, shown = level_prompts(tasks, levels, lp.context_examples, system=lp.system_prompt,
                                      budget=lp.context_chars)
    return prompts, shown, levels.pool()


def evaluate(
    model: Any, tok: Any, env: Environment, store: EpisodeStore, evaluation: list[Task], validation: list[Task],
    suite: Any, cfg: LoopConfig, max_calls: int, *, generation: int, redactor: Redactor | None = None,
) -> Evaluation:
    """Greedy held-out success without and with replayed context, validation, suite retention;
    the examples kept for the report are redacted."""
    red = (redactor or Redactor()).text
    from replaybank.llm.eval.suite import evaluate_suite

    lp, ev = cfg.loop, cfg.evaluation
    kw = eval_options(cfg, max_calls)
    tag = f"gen {generation} eval"
    sys_ = lp.system_prompt
    bare, s1 = attempt(model, tok, env, evaluation, build_prompts(evaluation, None, 0, system=sys_),
                       desc=f"{tag} no context", **kw)
    ctx_prompts, _, _ = context_prompts(store, evaluation, lp)
    ctx, s2 = attempt(model, tok, env, evaluation, ctx_prompts, desc=f"{tag} context", **kw)
    val, _ = attempt(model, tok, env, validation, build_prompts(validation, None, 0, system=sys_),
                     desc=f"{tag} validation", **kw)
    replay = None
    if lp.replay_workflows:  # the context arm, with a replayed workflow wherever one passes its checks
        replays = replay_tasks(env, store, evaluation)
        arm = [replays.attempts.get(a.task.id, a) for a in ctx]
        replay = ReplayArm(score=summarise(arm), counts=replays.counts())
    res = evaluate_suite(model, tok, suite, batch_size=ev.generation_batch_size, desc=f"{tag} suite")
    vote = None
    if lp.vote_groups:
        chosen, _, counts = vote_attempts(model, tok, env, evaluation, LevelRetriever.from_store(store, lp.retrieve),
                                          lp.context_examples, lp.vote_groups, system=sys_, budget=lp.context_chars,
                                          desc=f"{tag} vote", **kw)
        # model_calls: the vote's cost (every group's answers) where the chosen answers' would be
        vote = VoteArm(score=dataclasses.replace(summarise(chosen), model_calls=counts.model_calls),
                       groups=counts.groups, tokens=counts.tokens, unanimous=counts.unanimous,
                       context_model_calls=sum(max(len(a.steps), 1) for a in ctx))
    return Evaluation(
        vote=vote, no_context=summarise(bare), context=summarise(ctx), validation=summarise(val),
        suite=SuiteFigures(families=res["families"], retention=res["retention"], leakage=res["leakage"],
                           seconds=res["seconds"]),
        retention=suite_retention(res["retention"]),
        eval_tokens_per_second=EvalSpeed(no_context=s1.tokens_per_second, context=s2.tokens_per_second),
        examples=[Example(task=red(a.task.text), expected=[red(x) for x in a.task.expected], output=red(a.output),
                          success=a.verdict.success) for a in bare[:5]],
        replay=replay,
    )


def _recipe_words(name: str, recipe: Recipe | None) -> str:
    """``recipe self-distill: self at 50% of rows, KL-to-base weight 3 (rehearsal through the KL term only)``."""
    if recipe is None or not recipe.source:
        return "no rehearsal"
    return (f"recipe {name}: {', '.join(recipe.source)} at {recipe.ratio:.0%} of {recipe.mix_by}"
            + (f", KL-to-base weight {recipe.kl_to_base:g}" if recipe.kl_to_base > 0 else "")
            + ("" if recipe.rehearsal_ce else " (rehearsal through the KL term only)"))


def _line(row: GenerationRow, total: int) -> str:
    """The per-generation log line."""
    m = row.evaluation
    nc, c, ret = m.no_context, m.context, m.retention
    head = f"gen {row.generation}/{total}"
    if row.act is not None:
        act = row.act.score if isinstance(row.act, Acted) else row.act
        acted = f"acted {act.n} ({act.success:.0%} exact{', resumed' if row.act.resumed else ''})"
        head += (f" [{', '.join(map(str, row.lineage or []))}] {acted}, trained {row.train_steps} steps on "
                 f"{row.train_rows} rows")
    return (f"{head} | held-out exact {nc.success:.0%} (credit {nc.credit:.2f}) without context, "
            f"{c.success:.0%} ({c.credit:.2f}) with | validation {m.validation.credit:.2f} | "
            f"retention {'-' if ret is None else f'{ret:.0%}'}" + (f" | {row.seconds:.0f} s" if row.seconds is not None else ""))


def _run_one(name: str, cfg: LoopConfig, folder: str, worker: int | None = None) -> str:
    """One run of a grid (in a worker process when the grid runs several at a time)."""
    path = Path(folder)
    path = safe_folder(path.parent, path.name)  # a run's folder inside --out, not a link out of it
    refuse_links(path, "log.txt")
    with open(path / "log.txt", "a", encoding="utf-8") as logf:

        def log(msg: str) -> None:
            print(f"[{name}] {msg}", flush=True)
            logf.write(msg + "\n")
            logf.flush()

        run_loop(cfg, path, log=log, worker=worker)
    return name


def run_grid(runs: list[tuple[str, LoopConfig]], out: Path, *, jobs: int = 1, log: Callable[[str], None] = print) -> None:
    """Run (or resume) every run, ``jobs`` at a time, then write the report.

    Raises:
        UnsafePathError: a link (or anything but a regular file) at ``report.md``, ``metrics.json``
            or ``loop.png`` in ``out``, or at a run's folder: refused before any run starts.
    """
    out.mkdir(parents=True, exist_ok=True)
    refuse_links(out, *REPORT_FILES)  # before hours of runs, not after
    for name, _ in runs:
        safe_folder(out, name)
    # each run's config as its saved form reads back (the recipe it names declared among its tables),
    # whether the run goes to a worker process or not
    args = [(name, LoopConfig.from_dict(cfg.to_dict(), source=cfg.source), str(out / name), k)
            for k, (name, cfg) in enumerate(runs)]
    if jobs <= 1 or len(runs) == 1:
        for a in args:
            _run_one(*a[:3])  # one after another: each on the configured device
    else:
        with worker_pool(jobs) as pool:
            for done in pool.map(_run_one, *zip(*args, strict=True)):
                log(f"[{done}] finished")
    log(f"report: {write_report(out)}")
