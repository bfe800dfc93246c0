"""13.5.2, the learning rate and the number of workers, answered from a sweep's
trials: the best lr per worker count, the linear scaling rule's pairs, and the
warm-up arm that tries to rescue the rule at the largest batch. The answer is a
list of paragraphs; every number says how many seeds stand behind it."""

import math

import numpy as np
import pandas as pd

from orchestrator.config.dataset import DataFacts
from orchestrator.records import counted
from orchestrator.report.answers.cells import cell, none_learned, part_trials
from orchestrator.report.answers.compare import (acc_gap, accuracy_figures, accuracy_verdict,
                                                 cells_differ, compare_acc, compare_cells,
                                                 seed_accuracies)
from orchestrator.report.answers.learning_rates import (best_lr_moved, best_lr_ties, lr_table,
                                                        lr_trials)
from orchestrator.report.answers.linear_rule import (DECIDED_BY_FAILURE, OUTCOMES,
                                                     FAILED, RULE_TEXT_ONLY, failure_text,
                                                     learned_of, rule_figures, rule_found,
                                                     rule_verdict, seeds_needed, settled,
                                                     verdict_text)
from orchestrator.report.answers.noise import Noise
from orchestrator.report.answers.welch import POWER, SIGNIFICANCE, fisher_exact, paired_t
from orchestrator.report.answers.wording import (EXERCISES_COMMAND, acc_seeds_text, in_short,
                                                 learned_seeds_text, listed, missing_part,
                                                 one_worker_count, seeds_label)
from orchestrator.report.noise_scale import LEARNED_LOSS_FRACTION, learned
from orchestrator.report.tables import markdown_table


def answer_13_5_2(summary: pd.DataFrame, rule: pd.DataFrame, noise: Noise,
                  epochs: pd.DataFrame | None = None) -> list[str]:
    """`epochs`: the sweep's epochs, where the warm-up arm's seeds are followed out of
    the initial plateau (`_plateau_exits`)."""
    table = lr_table(summary)
    if table.empty:
        return [missing_part("batch-lr")]
    paragraphs = [markdown_table(table)]
    if len(table) < 2:
        return [*paragraphs, one_worker_count(table)]
    lr_columns = [column for column in table.columns if str(column).startswith("lr ")]
    searched = f"{lr_columns[0][3:]} to {lr_columns[-1][3:]}"
    bests = "; ".join(f"{counted(row.num_workers, 'worker')}, global batch "
                      f"{row.global_batch_size}: "
                      f"{row.best_lr:g}" for row in table.itertuples())
    sentences = [f"The best lr per worker count (the highest final test accuracy, each the "
                 f"mean over its seeds: {table['seeds'].iloc[0]} per lr at 1 worker, "
                 f"{table['seeds'].iloc[-1]} at {table['num_workers'].iloc[-1]}), each "
                 f"worker's batch {table['global_batch_size'].iloc[0]}: {bests}."]
    ties, apart, most_seeds, widest = best_lr_ties(table, lr_columns, summary, noise)
    sentences += best_lr_moved(table, summary, ties)
    best_against_best = _best_against_best(table, summary, noise)
    if best_against_best:
        sentences.append(best_against_best[0])
    if apart:  # one a line (a review: 119 words in one sentence)
        sentences.append("Told apart from the best:\n\n" + "\n".join(
            f"- {clause[:1].upper()}{clause[1:]}." for clause in apart) + "\n\n")
    if ties:
        needed = seeds_needed(widest[0], widest[2], noise, widest[1]) if widest else None
        more = (f"at {POWER:.0%} power about {needed[0]} seeds a side (`--repeats "
                f"{needed[0]}`) would tell the widest gap left tied, {widest[0]:.3f}, apart on "
                f"{needed[3]} (sd {needed[1]:.3f}), and more the narrower ones"
                if needed and needed[0] else
                f"more seeds than the {most_seeds} these means have at most would tell them "
                f"apart, if anything does")
        sentences.append(f"Not resolved: {'; '.join(ties.values())}; {more}.")
    def owner(count) -> str:
        """"1 worker's", "2 workers'"."""
        text = counted(count, "worker")
        return text + ("'" if text.endswith("s") else "'s")

    edges = [f"{owner(row.num_workers)} ({row.on_edge} of {searched})"
             for row in table.itertuples() if row.on_edge in ("lowest", "highest")]
    if edges:
        sentences.append(f"A best on the edge of the range searched is only a bound: the best "
                         f"may lie beyond it, so widen the range (`--lr`) for "
                         f"{', '.join(edges)}.")
    if rule.empty:
        sentences.append("No lr was searched at k workers that is k times one searched at 1 "
                         f"worker, so the linear scaling rule is untested: `{EXERCISES_COMMAND}` "
                         f"searches 0.1 to 0.8.")
        return [*paragraphs, _paragraph(sentences), *_warmup(summary, noise, epochs)[0]]
    # The table's verdicts in the sentences' words (its codes are linear_rule's).
    paragraphs.append(markdown_table(rule.drop(columns=RULE_TEXT_ONLY, errors="ignore").assign(
        held=rule["held"].map(lambda held: OUTCOMES[held].removeprefix("was ")))))
    pairs = "\n".join(
        f"- lr {row.lr_1_worker:g} on 1 worker reached {row.acc_1_worker:.3f} "
        f"({learned_seeds_text(row.seeds_1_worker, row.not_learned_1_worker)}), "
        f"lr {row.scaled_lr:g} on {row.num_workers} workers "
        f"(global batch {row.global_batch_size}) {row.acc_scaled:.3f} "
        f"({learned_seeds_text(row.seeds_scaled, row.not_learned_scaled)}), "
        f"{_rule_pair_versus(row, noise)} it: the rule "
        f"{verdict_text(row.held, not np.isnan(row.p), _resolution(row, noise))}."
        for row in rule.itertuples())
    # One pair a line: each is a sentence of its own, with its test.
    best_paragraph, sentences = _paragraph(sentences), []
    rule_paragraph = (f"The linear scaling rule (k times the batch at k times the lr, the same "
                      f"epochs) was tested in {counted(len(rule), 'pair')}, a lower accuracy "
                      f"called only "
                      f"at p < {SIGNIFICANCE:g} by a t test on the seeds ("
                      + ("seed for seed on the seeds both sides ran, else " if
                         noise.acc_seed_for_seed else "")
                      + f"Welch's where both have two or more, else against the sweep's pooled "
                      f"seed spread; without replicas, beyond the sweep's accuracy noise):"
                      f"\n\n{pairs}")
    num_epochs = int(lr_trials(summary)["num_epochs"].max())
    verdicts = set(rule["held"])
    if verdicts & {"no", *FAILED}:
        sentences.append(
            f"Where the rule did not hold: a k-fold batch makes 1/k of the updates in "
            f"{counted(num_epochs, 'epoch')}, and the larger lr is meant to make up for them, "
            f"which Goyal et al. (2017) found to need a warm-up of the lr at large batches "
            f"(below); how accuracy scales with the number of workers depends on re-tuning the lr (and "
            f"the epochs) for each global batch.")
        sentences += [text for text in [_stuck_at_chance(summary, rule)] if text]
    elif verdicts <= {"inconclusive"}:
        sentences.append("No pair could test the rule: 1 worker learned at none of its lrs.")
    else:
        sentences.append("No pair tested refuted the rule in this sweep.")
    each = " and ".join(f"{row.best_lr:g} on {counted(row.num_workers, 'worker')} (global "
                        f"batch {row.global_batch_size})" for row in table.itertuples())
    short = (f"The best lr (the highest mean accuracy) was {each}"
             + (", each not told apart from the next best" if len(ties) == len(table) else
                f", at {listed([counted(k, 'worker') for k in sorted(ties)])} not told apart "
                f"from the next best" if ties else "")
             + (f"; {best_against_best[1]}" if best_against_best else "")
             + f". The linear scaling rule (k times the lr for k times the batch), named by the "
               f"k workers' lr: {rule_found(rule)}.")
    warmup, briefs = _warmup(summary, noise, epochs)
    if briefs:
        short += f" With a warm-up epoch, {listed(briefs)}."
    return [in_short(short), *paragraphs, best_paragraph, rule_paragraph, " ".join(sentences),
            *warmup, "`test_acc_vs_lr.png` plots test accuracy against the lr."]


def _paragraph(sentences: list[str]) -> str:
    """Sentences as one paragraph, a list among them (ending in a blank line) kept apart
    from the sentence after it."""
    return " ".join(sentences).replace("\n\n ", "\n\n").strip()


def _best_against_best(table: pd.DataFrame, summary: pd.DataFrame,
                       noise: Noise) -> tuple[str, str] | None:
    """How accuracy scales with the workers, each at its best lr: the largest worker
    count's best cell against 1 worker's, as a sentence with its test and as a clause
    for the section's first paragraph; None where a best did not learn or is missing."""
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    bests = []
    for row in (table.iloc[0], table.iloc[-1]):
        at = trials[(trials["num_workers"] == row["num_workers"])
                    & (trials["global_batch_size"] == row["global_batch_size"])
                    & np.isclose(trials["lr"], row["best_lr"])]
        bests.append(cell(at) if not at.empty else None)
    one, many = bests
    if (one is None or many is None or int(one["num_workers"]) == int(many["num_workers"])
            or none_learned(one) or none_learned(many)):
        return None
    k = counted(int(many["num_workers"]), "worker")
    verdict, marked = accuracy_verdict(many, one, noise)
    verdict += f" ({marked})" if marked else ""
    return (f"Each at its best lr, {k} (global batch {many['global_batch_size']}) reached "
            f"{many['final_test_acc']:.3f} ({acc_seeds_text(many)}), "
            f"{compare_cells(many, one, noise)} 1 worker's {one['final_test_acc']:.3f} "
            f"({acc_seeds_text(one)}) in the same epochs.",
            f"at its best lr {k}' accuracy was {verdict} 1 worker's at its own "
            f"({accuracy_figures(many, one, noise)})")


def _rule_pair_versus(row, noise: Noise) -> str:
    """`compare_acc` of a linear_rule row's k workers with its 1 worker, by the row's
    t test where it has one."""
    return compare_acc(row.acc_scaled, row.acc_1_worker, noise, row.test,
                       (int(row.seeds_scaled), int(row.seeds_1_worker)))


# A final training loss this close to ln C (relatively) is a uniform guess's.
CHANCE_LOSS_MARGIN = 0.02


def _stuck_at_chance(summary: pd.DataFrame, rule: pd.DataFrame) -> str:
    """Where the rule failed because seeds did not learn, and every such seed ended at
    a uniform guess's loss (within CHANCE_LOSS_MARGIN of ln C) or diverged: an lr past
    what the first steps tolerate, not a shortage of updates. Empty otherwise."""
    trials = lr_trials(summary)
    if "final_train_loss" not in trials:
        return ""
    lrs, confounds = [], []
    for pair in rule[rule["held"].isin(FAILED)].itertuples():
        at = trials[(trials["num_workers"] == pair.num_workers)
                    & (trials["global_batch_size"] == pair.global_batch_size)
                    & np.isclose(trials["lr"], pair.scaled_lr)]
        failed = at[~learned(at)]
        loss = failed["final_train_loss"].astype(float)
        classes = (failed["num_classes"] if "num_classes" in failed
                   else pd.Series(DataFacts().num_classes, index=failed.index))
        flat = ~np.isfinite(loss) | (loss >= (1 - CHANCE_LOSS_MARGIN) * np.log(classes))
        if len(failed) and flat.all():
            lrs.append(f"lr {pair.scaled_lr:g} on {counted(pair.num_workers, 'worker')}")
            same_lr = trials[(trials["num_workers"] == 1) & np.isclose(trials["lr"],
                                                                       pair.scaled_lr)]
            if learned(same_lr).any():
                confounds.append(_same_lr_learned(same_lr, at, pair.scaled_lr))
    if not lrs:
        return ""
    return (f"At {', '.join(lrs)} every seed that did not learn ended at a "
            f"uniform guess's training loss (ln C for C classes) or diverged, its output no "
            f"longer depending on its input: a sign that the scaled lr was past what early "
            f"training tolerates, rather than short of updates, which is what a warm-up of the "
            f"lr addresses (Goyal et al., 2017)." + "".join(confounds))


def _same_lr_learned(same_lr: pd.DataFrame, at: pd.DataFrame, lr: float) -> str:
    """Where the lr at which k workers' seeds did not learn learned at 1 worker (a
    smaller batch): what the seeds cannot separate, and how many learned on each side."""
    ones = learned_of(len(same_lr), int((~learned(same_lr)).sum()))
    ks = learned_of(len(at), int((~learned(at)).sum()))
    p = fisher_exact(ks, ones)
    batches = ", ".join(str(int(batch)) for batch in sorted(same_lr["global_batch_size"].unique()))
    return (f" Yet lr {lr:g} itself learned at 1 worker (global batch {batches}: "
            f"{ones[0]} of {counted(ones[1], 'seed')} learned there against {ks[0]} of {ks[1]}, "
            f"Fisher's exact p = {p:.2g}), so these seeds do not tell the lr's part from the "
            f"larger batch's (and its fewer updates); more seeds of 1 worker at lr {lr:g} "
            f"(`--repeats`) would.")


def _resolution(pair, noise: Noise) -> str:
    """`resolution_text` of a linear rule pair (a row of `linear_rule`), or where seeds
    that did not learn decided it, `failure_text`."""
    if pair.held in FAILED:
        return failure_text(learned_of(pair.seeds_scaled, pair.not_learned_scaled),
                            learned_of(pair.seeds_1_worker, pair.not_learned_1_worker))
    return rule_figures(pair.held, acc_gap(pair.acc_scaled, pair.acc_1_worker, pair.test),
                        (int(pair.seeds_scaled), int(pair.seeds_1_worker)), noise, pair.test)


def _warmup(summary: pd.DataFrame, noise: Noise, epochs: pd.DataFrame | None = None
            ) -> tuple[list[str], list[str]]:
    """Each warm-up arm (one per lr, at the largest global batch) against the same lr
    and batch without warm-up, and against 1 worker at 1/k of the lr: whether warm-up
    rescued the linear scaling rule there; and each arm's finding in a few words, for
    the first paragraph."""
    arm = part_trials(summary, "warmup").dropna(subset=["final_test_acc"])
    if arm.empty:
        return [f"No warm-up arm ran: `{EXERCISES_COMMAND}` runs one (a warm-up epoch at the "
                f"largest global batch with the linearly scaled lr)."], []
    arm = arm[arm["global_batch_size"] == arm["global_batch_size"].max()]
    arms = [_warmup_sentences(summary, arm[np.isclose(arm["lr"], lr)], noise, epochs)
            for lr in sorted(arm["lr"].unique())]
    return ([" ".join(sentence for sentences, _ in arms for sentence in sentences)],
            [brief for _, brief in arms if brief])


def _warmup_sentences(summary: pd.DataFrame, arm: pd.DataFrame, noise: Noise,
                      epochs: pd.DataFrame | None = None) -> tuple[list[str], str]:
    """The warm-up arm's trials (one lr, its seeds) against the same lr and batch
    without warm-up, and against 1 worker at 1/k of the lr, decided as the linear
    rule's pairs are (`rule_verdict`: a t test on the seeds where there is one, else
    the accuracy noise); and the finding in a few words ("at lr 0.8 2 of 3 seeds
    learned, against 0 of 3 without"), empty without a 1-worker trial to hold it to."""
    warm = cell(arm)
    k, batch, lr = int(warm["num_workers"]), warm["global_batch_size"], warm["lr"]
    trials = lr_trials(summary).dropna(subset=["final_test_acc"])
    cold = cell(trials[(trials["num_workers"] == k) & (trials["global_batch_size"] == batch)
                       & np.isclose(trials["lr"], lr)])
    one = cell(trials[(trials["num_workers"] == 1) & np.isclose(trials["lr"], lr / k)])
    start = warm.get("warmup_start_lr", 0.0)
    start = 0.0 if pd.isna(start) else float(start)
    ramp = (f"from {start:g} (1 worker's lr, as Goyal et al., 2017, start from the small "
            f"batch's) to {lr:g}" if math.isclose(start, lr / k)
            else f"from {start:g} to {lr:g}" if start > 0
            else f"from zero to {lr:g} (Goyal et al., 2017, start from the small batch's lr, "
                 f"{lr / k:g}: a ramp from zero spends the epoch at half the lr on average)")
    sentences = [f"With a {warm['warmup_epochs']}-epoch linear warm-up of the lr {ramp} at "
                 f"global batch {batch} on {k} workers, the final test accuracy was "
                 f"{warm['final_test_acc']:.3f} ({acc_seeds_text(warm)})."]
    # A mean over seeds that learned and seeds that did not is an outcome of two kinds:
    # there the counts are compared (Fisher's exact test), not the means.
    counts = ((learned_of(warm["seeds"], warm["not_learned"]),
               learned_of(cold["seeds"], cold["not_learned"]))
              if cold is not None and (int(warm["not_learned"]) or int(cold["not_learned"]))
              else None)
    if counts:
        learned, cold_learned = counts
        p = fisher_exact(learned, cold_learned)
        sentences.append(
            f"Without warm-up it was {cold['final_test_acc']:.3f} ({acc_seeds_text(cold)}): "
            f"{learned[0]} of {counted(learned[1], 'seed')} learned with warm-up against "
            f"{cold_learned[0]} of {cold_learned[1]} without, Fisher's exact p = {p:.2g}"
            + ("." if p < SIGNIFICANCE else
               ": whether warm-up makes this lr learn, these seeds do not settle."))
    elif cold is not None:
        # A lower mean not told apart is no finding that warm-up did not help (a grading).
        differ = cells_differ(warm, cold, noise)
        helped = (": warm-up hurt at this lr" if differ < 0 else
                  ": these seeds show no gain from warm-up at this lr, which does not show "
                  "there is none" if differ == 0
                  and warm["final_test_acc"] < cold["final_test_acc"] else "")
        sentences.append(f"That is {compare_cells(warm, cold, noise)} "
                         f"{cold['final_test_acc']:.3f} without warm-up "
                         f"({acc_seeds_text(cold)}){helped}.")
    if cold is not None and epochs is not None:
        sentences += [text for text in [_plateau_text(warm, cold, summary, epochs)] if text]
    if one is None:
        return sentences + [f"No 1-worker trial at lr {lr / k:g} holds it to the linear "
                            f"scaling rule."], ""
    held = rule_verdict(warm["final_test_acc"] - one["final_test_acc"], None, noise, one, warm)
    test = (None if held in DECIDED_BY_FAILURE or warm["not_learned"] or one["not_learned"]
            else noise.seed_test(seed_accuracies(warm), seed_accuracies(one), rows=(warm, one)))
    gap = acc_gap(warm["final_test_acc"], one["final_test_acc"], test)
    if test is not None:
        held = settled(rule_verdict(gap, test, noise), gap, test, noise)
    sizes = (int(warm["seeds"]), int(one["seeds"]))
    resolution = (failure_text(*(learned_of(cell_row["seeds"], cell_row["not_learned"])
                                 for cell_row in (warm, one)))
                  if held in FAILED else
                  rule_figures(held, gap, sizes, noise, test))
    # Where a side's seeds did not all learn, its mean mixes two outcomes: the verdict's
    # counts compare them, not the means.
    compared = ("" if int(warm["not_learned"]) or int(one["not_learned"]) else
                compare_acc(warm["final_test_acc"], one["final_test_acc"], noise, test, sizes))
    if compared:
        sentences.append(f"It was {compared} 1 worker's {one['final_test_acc']:.3f} at lr "
                         f"{lr / k:g} ({acc_seeds_text(one)}).")
    where = (f"from 1 worker's lr {lr / k:g}" if compared else
             f"from 1 worker's lr {lr / k:g} ({one['final_test_acc']:.3f}, "
             f"{acc_seeds_text(one)})")
    brief = (f"at lr {lr:g} {counts[0][0]} of {counted(counts[0][1], 'seed')} learned, "
             f"against {counts[1][0]} of {counts[1][1]} without" if counts else
             f"at lr {lr:g} the rule {OUTCOMES[held].removesuffix(' (no seed learned)')}")
    return sentences + [
        f"With warm-up, at global batch {batch} {where}, the linear scaling rule "
        f"{verdict_text(held, test is not None, resolution)}.",
        *_learned_seeds(warm, one, lr / k, noise)], brief


def _plateau_exits(row: pd.Series, summary: pd.DataFrame, epochs: pd.DataFrame,
                   mark: float) -> dict[float, int | None]:
    """Each seed of a cell: the first epoch whose training loss fell below `mark`, None
    where none did."""
    trials = summary[summary["trial_id"].isin(row.get("trial_ids", ()))]
    exits = {}
    for trial in trials.itertuples():
        if trial.seed in exits or pd.isna(trial.seed):
            continue
        losses = epochs[epochs["trial_id"] == trial.trial_id].sort_values("epoch")
        below = losses[losses["train_loss"] < mark]["epoch"]
        exits[trial.seed] = int(below.iloc[0]) if len(below) else None
    return exits


def _plateau_text(warm: pd.Series, cold: pd.Series, summary: pd.DataFrame,
                  epochs: pd.DataFrame) -> str:
    """When each seed left the initial plateau with warm-up and without, seed by seed (a
    grading: at lr 0.4 warm-up left it later in every seed, one seed at chance for four
    epochs, and the sheet read only the last epoch); descriptive, untested. Empty
    where the two share no seed or the epochs hold no training loss."""
    if "train_loss" not in epochs:
        return ""
    # The learned mark (`noise_scale.learned`): a share of a uniform guess's loss, ln C (a
    # trials.csv from before num_classes was recorded: Fashion-MNIST's).
    classes = warm.get("num_classes")
    classes = DataFacts().num_classes if classes is None or pd.isna(classes) else int(classes)
    mark = LEARNED_LOSS_FRACTION * math.log(classes)
    exits = [_plateau_exits(row, summary, epochs, mark) for row in (warm, cold)]
    seeds = sorted(set(exits[0]) & set(exits[1]))
    if not seeds:
        return ""

    def when(side: dict) -> str:
        return listed([f"{side[seed]}" if side[seed] is not None else "never"
                       for seed in seeds])

    timed = [seed for seed in seeds if None not in (exits[0][seed], exits[1][seed])]
    later = sum(exits[0][seed] > exits[1][seed] for seed in timed)
    earlier = sum(exits[0][seed] < exits[1][seed] for seed in timed)
    shift = (sum(exits[0][seed] - exits[1][seed] for seed in timed) / len(timed)
             if timed else 0.0)
    of = f"of {counted(len(timed), 'seed')}"
    verdict = (f"later in {later} {of} and earlier in none, by {shift:.1f} epochs on average "
               f"(described, not tested); a run that leaves it later has fewer epochs left to "
               f"learn in, which the final accuracy carries" if later and not earlier else
               f"earlier in {earlier} {of} and later in none, by {-shift:.1f} epochs on "
               f"average (described, not tested)" if earlier and not later else
               f"later in {later} and earlier in {earlier} {of} (described, not tested)"
               if later or earlier else "")
    if not verdict and all(exits[0][seed] == exits[1][seed] for seed in seeds):
        return ""  # every seed left it in the same epoch both ways: nothing to tell
    return (f"Seed by seed ({seeds_label(tuple(seeds))}), the training loss first fell below "
            f"{LEARNED_LOSS_FRACTION:.0%} of a uniform guess's (ln {classes}: the initial "
            f"plateau left) in epoch{'s' if len(seeds) > 1 else ''} {when(exits[0])} with "
            f"warm-up and {when(exits[1])} without" + (f": {verdict}." if verdict else "."))


def _learned_seeds(warm: pd.Series, one: pd.Series, one_lr: float, noise: Noise) -> list[str]:
    """Where some of the warm-up arm's seeds learned and some did not: those that
    learned against 1 worker's same seeds, seed for seed (the rule's question asked of
    the runs it can be asked of: a review left it unasked). Empty otherwise."""
    learned = set(warm["learned_seed_ids"]) & set(one["learned_seed_ids"])
    if not 0 < len(warm["learned_seed_ids"]) < int(warm["seeds"]) or not learned:
        return []
    sides = [{seed: acc for seed, acc in seed_accuracies(row).items() if seed in learned}
             for row in (warm, one)]
    # Seeds picked for an outcome, held to their own differences, not the pool's spread
    # (a grading: this arm's learned seeds hold the pool's largest residuals, so the pool
    # gave p = 0.011 where their own two differences give about 0.4); one seed: untested.
    test = paired_t(*sides, noise.acc_blocks.sd, why="seeds picked for having learned")
    means = [sum(side.values()) / len(side) for side in sides]
    versus = (f"{compare_acc(means[0], means[1], noise, test, (len(learned),) * 2)} "
              if test is not None else "untested (one seed), against ")
    return [f"On the {seeds_label(tuple(sorted(learned)))} that learned with warm-up, it "
            f"reached {means[0]:.3f}: {versus}1 worker's {means[1]:.3f} at lr {one_lr:g} on "
            f"the same seed{'s' if len(learned) > 1 else ''}: how those that learn compare, "
            f"not a verdict on the rule."]
