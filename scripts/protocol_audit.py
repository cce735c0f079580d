"""The audit of every published row (config/reference.yaml) against the paper profile: docs/protocol-audit.md.

    python scripts/protocol_audit.py            # print the table
    python scripts/protocol_audit.py --write    # rewrite the table in docs/protocol-audit.md (between its markers)

One line per row: the dataset, the split, the statistic, the normalisers and the model entry that
the paper profile (config/default.yaml) trains for it, and whether they match the protocol the
number was measured under. What the config can say is derived here, not typed: the dataset and the
model entry exist, the pair passes the workflow's model/data check, the split sizes equal the ones
in the row's ``protocol`` text, and the statistic is one the evaluation writes (a zero-shot
resolution of the dataset, one of its evaluation sets, its seen/unseen frame groups, one of its
output channels). What it cannot say (a number quoted from another setting, a model entry that is
ours rather than the authors', a metric computed differently) is in :data:`JUDGEMENTS`, keyed by
row, each with its reason; tests/opflow/test_reference.py keeps the page and the config in step.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "protocol-audit.md"
BEGIN, END = "<!-- audit table: python scripts/protocol_audit.py --write -->", "<!-- end of audit table -->"

#: verdicts, in the order the summary counts them
MATCHES, PARTLY, NO = "matches", "partly", "no"

#: (regex on the row key, verdict, why): the judgement the config cannot derive; the first match wins.
#: A row no pattern names gets ``matches`` when everything derived matches.
JUDGEMENTS: list[tuple[str, str, str]] = [
    (r"^darcy/gt/", PARTLY, "ambiguous: the number (0.0084) equals, to ONO's printed digits, the Galerkin paper's 141 x 141 result (0.00839, 1024/100, its Table 2(b)), most likely quoted from it; gt at 85 attends on a 26 x 26 grid, a setting the Galerkin paper did not report"),
    (r"^(darcy|ns_v1e-5)/gnot_official/", PARTLY, "the release has no loader for the grid sets: whether its trunk also read the input value at the query point, and whether it standardised the coordinates and the input function, cannot be inferred (docs/gnot.md); ours: standardised coordinates at the queries, [x, a] in the input function, unit-Gaussian input normaliser"),
    (r"^elasticity972/gnot_official/", MATCHES, "the release at the paper's size; its elasticity input function (the point cloud itself, 2 coordinates) inferred from the 1,756,721 parameters and --branch-sizes 2, not from a released loader (docs/gnot.md)"),
    (r"/gnot/", PARTLY, "model entry: gnot is opflow's variant (eq. 7 mean, eq. 9 without the q~ skip, raw coordinates); the number was measured with the release (gnot_official)"),
    (r"^darcy43/ono/", PARTLY, "model entry: ono is opflow's ONO (the paper's ONO-8 at Darcy with a Nystrom block, docs/ono.md); the release's zero-shot command (Linear Transformer block) is ono_official_zeroshot, whose rows follow"),
    (r"^elasticity972/ono/", PARTLY, "model entry: ono is opflow's ONO (the paper's ONO-8 at Darcy, docs/ono.md); the release's elasticity command (Nystrom block, k 8, the point's place in the list as an input) is ono_official_elasticity, whose row follows"),
    (r"^(darcy|ns_v1e-5|ns_v1e-5_tgen)/ono/", PARTLY, "model entry: ono is opflow's ONO (the paper's ONO-8 at Darcy, docs/ono.md); ono_official is the release's Darcy command, ono_official_zeroshot its zero-shot one, ono_official_elasticity its elasticity one, ono_official_ns and ono_official_tgen its NS2d and time-generalisation ones, whose rows follow"),
    (r"^ns_v1e-5/ono_official_ns/", MATCHES, "the release's NS2d command and training loop (NS_example2.py: the 10 target frames predicted in turn with the true frame slid into the window, their relative L2 losses summed per optimiser step: training.unroll truth; no normaliser); one difference: its grid coordinates are linspace(0, 1, 64), ours the periodic grid's j / 64, a factor 64/63 on the coordinate inputs"),
    (r"^ns_v1e-5_tgen/ono_official_tgen/", PARTLY, "the README's time-generalisation command (k 8), but time_gen.py is not in the release: its loop is taken to be NS_example2.py's on the training frames 11-18 (ono_official_ns's, the same coordinate difference)"),
    (r"^ns_v1e-5(_tgen)?/fno/", PARTLY, "fno is the FNO code's Darcy network and recipe (width 32, lr 1e-3, pointwise normalisers) trained on teacher-forced pairs; the FNO code's NS2d script (fourier_2d_time.py, as of the paper: width 20, lr 0.0025, BatchNorm after each Fourier layer, no normaliser, 10 frames per step on its own predictions) is fno2d_time, whose row follows"),
    (r"^ns_v1e-5/fno2d_time/", PARTLY, "the FNO code's NS2d script as of the paper (fourier_2d_rnn.py, Oct. 2020) with three differences: it put the grid channels first, so its loop's xx[..., step:-2] fed the second frame (y, 8 frames, prediction, x, y) and from the third on a window without the last two input frames (the authors fixed the order in May 2021; ours slides the window as the fixed script); its test pass ran in training mode, BatchNorm with each test batch's statistics (20 trajectories in order; ours: the running statistics); its grid is linspace(0, 1, 64), ours j / 64"),
    (r"^darcy(141|211)/fno2d_1cycle/", PARTLY, "the 1cycle retraining's 2D script was not released: fno2d_1cycle is the author's May 2021 fourier_2d.py (ReLU, no padding) with the StepLR replaced by OneCycleLR for 100 epochs as in his released 1D script; batch 4 is inferred from App. C.1 (the FNO code's 20 is the alternative)"),
    (r"^darcy_inverse(141|211)_eps[0-9.]+/gt_inverse/", MATCHES, "Table 3's 'GT Ln on K,V' row (per-head norms of K and V, no layer norm on the residual stream), as the row says; the authors' released ex3 script trains the 'regular Ln' variant instead, whose own rows are gt_inverse_regular's"),
    (r"^darcy_inverse(141|211)_eps[0-9.]+/gt_inverse_regular/", MATCHES, "Table 3's 'GT regular Ln' row: the configuration of the authors' released ex3 script (post-LN on the residual stream, no per-head norms); 1cycle peak at epoch 30 as App. C.1 says for all models (the script's is epoch 20: pct_start 0.2)"),
    (r"^darcy_inverse(141|211)_coarse_eps[0-9.]+/fno2d_1cycle/", PARTLY, "Table 3's 'FNO2d (only n_c)': the paper does not describe the run and its script was not released; ours is the reading of the authors' released data class with its input subsampling equal to its coarse one (the noisy solution strided to n_c, the coefficient averaged onto n_c: view.inputs coarse), trained with fno2d_1cycle, the recipe of Table 2(b)'s 'FNO2d 1cycle' ('using the same trainer')"),
    (r"^darcy_inverse(141|211)_fine_eps[0-9.]+/fno2d_1cycle/", PARTLY, "Table 3's 'FNO2d (only n_f)': the paper does not describe the run and its script was not released; ours: FNO on the fine grid from the noisy solution to the coefficient itself (view factor 1; the released data class would average the 421 coefficient over 3 x 3 or 2 x 2 nodes, ours takes the grid's values), trained with fno2d_1cycle"),
    (r"^darcy_inverse(141|211)_eps[0-9.]+/ft_inverse(_regular)?/", PARTLY, "Table 3's FT rows: the paper gives no setting of its own for them; ours: gt_inverse's network and trainer with Fourier attention (per-head norms on Q, K, or eq. 7's post-LN block), init eta = delta = 1e-2 and lr 1e-3 as the authors' notes run it at 141 -> 36; their 211 -> 71 command's FFN dropout 0.1 and lr 5e-4 are not taken (one recipe for both grids)"),
    (r"^darcy_inverse(141|211)_eps[0-9.]+/st_inverse(_regular)?/", PARTLY, "Table 3's ST rows: the paper gives no setting of its own for them; ours follow the authors' notes: FT's settings carried over (those of ft_inverse), softmax's peak lr 5e-4"),
    (r"^darcy_inverse(141|211)_eps[0-9.]+/lt_inverse(_regular)?/", PARTLY, "Table 3's LT rows: the paper gives no setting of its own for them; ours follow the authors' notes: GT's settings carried over (those of gt_inverse); LT is their 'linear' attention (cao_linear: efficient attention / n)"),
    (r"^darcy(141|211)/(ft|gt)_regular/", PARTLY, "Table 2(b)'s 'FT / GT regular Ln': the paper gives no setting of its own for them; ours are ft / gt with eq. 7's post-LN block in place of the per-head norms (the authors' --layer-norm), every other setting ft's / gt's"),
    (r"^darcy(141|211)/st(_regular)?/", PARTLY, "Table 2(b)'s ST rows: the paper gives no setting of its own for them; ours follow the authors' notes: ft's settings carried over (eta = 1e-3, FFN dropout 0.1, peak lr 5e-4, also their README's for softmax), attention dropout 0.1"),
    (r"^darcy(141|211)/lt(_regular)?/", PARTLY, "Table 2(b)'s LT rows: the paper gives no setting of its own for them; ours follow the authors' notes: gt's settings carried over, attention dropout 0.1; LT is their 'linear' attention (cao_linear: efficient attention / n)"),
    (r"^burgers(512|2048)?/gt1d_regular/", PARTLY, "Table 2(a)'s 'GT regular Ln': post-LN (eq. 7), the dropouts of Table 7 (attention 0.1, FFN 0.1; App. C.2: the 0.1 made it converge); but Table 8 prints the n = 2048 number (1.512) for the run without the 0.1 and the n = 8192 one (2.747) for none of its runs; ours trains the 0.1 at every n. Our attention dropout is on the attention block's output; the authors' code also drops entries of K^T V with p = 0.5 in every run, in evaluation too (the model options kv_dropout: 0.5, kv_dropout_eval: true; off here; docs/reproductions.md)"),
    (r"^burgers(512|2048)?/ft1d_regular/", PARTLY, "Table 2(a)'s 'FT regular Ln': the paper gives neither its dropouts nor its init; ours keeps ft1d's (attention 0.0, FFN 0.05; eta = 1e-3)"),
    (r"^burgers(512|2048)?/st1d(_regular)?/", PARTLY, "Table 2(a)'s ST rows: the paper gives neither their dropouts, init nor learning rate; ours follow the authors' code and notes: FT's settings carried over (eta = 1e-3, FFN dropout 0.05), attention dropout 0.1 (their encoder layer's for softmax), peak learning rate 5e-4 (their README for softmax attention)"),
    (r"^burgers(512|2048)?/lt1d(_regular)?/", PARTLY, "Table 2(a)'s LT rows: the paper gives neither their dropouts nor their init; ours follow the authors' code and notes: GT's settings carried over (eta = 1e-2, FFN dropout 0.0), attention dropout 0.1 (their encoder layer's for the linear kernel); LT is their 'linear' attention (cao_linear: efficient attention / n)"),
    (r"^darcy_lognormal(64|416)/fno_neuralop/|^darcy_piecewise416/fno_neuralop/|^kolmogorov/fno_neuralop/", PARTLY, "fno_neuralop is the NeuralOperator library's FNO the paper names (12 modes, width 128, channel MLPs: 5,705,089 parameters counted as the library counts, the paper's 5.70e6; equal to neuralop 1.0.0's forward to 1.6e-6 in float32 with shared weights, benchmarks/results/fno_neuralop.json) with its batch and lr; the paper states neither its epochs, schedule nor normalisers (ours: the default trainer's AdamW, OneCycle, 500 epochs; unit-Gaussian normalisers)"),
    (r"^darcy_lognormal64/ft/", PARTLY, "the paper's 'Galerkin Transformer' with Fourier attention: its size is not stated; ft is Cao's 2D Darcy network"),
    (r"^lorenz63/tno/", PARTLY, "the authors' metric (relative L2 after standardising y and z) with the training split's statistics; theirs used each set's own; a bound from the text, not a table"),
    (r"^elasticity972/gt/", NO, "refused by the model/data check: gt needs a regular grid (the GNOT paper ran GK-Transformer with a point-wise decoder on the point cloud; 0.0240 is quoted without a seed-paper table)"),
    (r"^airfoil/|^pipe/|^plasticity/", NO, "data not available: no generator for the Geo-FNO airfoil, pipe and plasticity sets (PROTOCOLS.md)"),
    (r"^ns2d_c/", NO, "data not available: GNOT's COMSOL set, no open generator"),
]

#: published models that opflow does not implement
NOT_IMPLEMENTED = "model not implemented in opflow"


@dataclass
class Row:
    key: str
    dataset: str
    split: str
    statistic: str
    normalisers: str
    model: str
    verdict: str
    why: str


def _split_of_protocol(text: str) -> tuple[int, ...] | None:
    """The ``train/test`` or ``train/val/test`` sizes written in a row's protocol text."""
    m = re.search(r"(\d+)/(\d+)(?:/(\d+))?\s*$", text)
    return None if m is None else tuple(int(g) for g in m.groups() if g is not None)


def _where_computed(wf: Any, dataset: str, where: tuple[str, str] | None) -> str | None:
    """None when the evaluation writes the statistic at ``where``; otherwise why not."""
    if where is None:
        return None
    kind, name = where
    ds = wf.dataset(dataset)
    if kind == "zero_shot":
        return None if int(name) in ds.zero_shot else f"{name} is not among datasets.{dataset}.zero_shot {ds.zero_shot}"
    if kind == "eval_set":
        return None if name in ds.eval_sets else f"no evaluation set {name!r}"
    if kind == "frames":
        tf = getattr(ds.view, "train_frames", None)
        return None if tf and name in ("seen", "unseen") else "no seen/unseen frame groups (view.train_frames)"
    if kind == "channel":
        outs = ds.task.outputs or []
        return None if name in outs else f"no output channel {name!r}"
    return f"unknown place {kind!r}"


def audit(config_path: Path = REPO / "config" / "default.yaml", reference_path: Path = REPO / "config" / "reference.yaml") -> list[Row]:
    """One :class:`Row` per published number, in the order of the reference file."""
    from opflow.config import load_config_files, parse_workflow
    from opflow.data.errors import ConfigError
    from opflow.reference import load_reference
    from pipeline.config import check_pairs

    cfg = load_config_files([str(config_path)])
    wf = parse_workflow(cfg)
    rows = []
    for e in load_reference(reference_path):
        what = e.statistic if e.where is None else f"{e.statistic} @ {e.where[0]}:{e.where[1]}"
        has_ds, has_model = e.dataset in wf.datasets, e.model in wf.models
        published = _split_of_protocol(e.protocol)
        split, normalisers, problems = "-", "-", []
        if has_ds:
            ds = wf.dataset(e.dataset)
            ours = (ds.train, ds.val, ds.test) if ds.val else (ds.train, ds.test)
            split = "/".join(map(str, ours)) + ("" if published == ours else f" (published {'/'.join(map(str, published or ())) or '?'})")
            if published is not None and published != ours:
                problems.append(f"split {'/'.join(map(str, ours))} is not the published {'/'.join(map(str, published))}")
            missing = _where_computed(wf, e.dataset, e.where)
            if missing:
                problems.append(f"statistic not computed: {missing}")
        else:
            problems.append("dataset not configured")
        if has_ds and has_model:
            tc = wf.train_config(e.dataset, e.model)
            normalisers = f"{tc.input_normalizer} / {tc.output_normalizer}"
            try:
                check_pairs(wf, [(e.dataset, e.model)])
            except ConfigError as err:
                problems.append(f"refused: {str(err).split(': ', 2)[-1][:120]}")
        model = e.model if has_model else f"- ({e.model})"
        if not has_model:
            problems.append(NOT_IMPLEMENTED)
        judged = next(((v, text) for pattern, v, text in JUDGEMENTS if re.search(pattern, e.key)), None)
        if judged is not None and judged[0] == NO:
            verdict, why = NO, judged[1]
        elif problems:  # derived: the config cannot run the protocol, whatever else is said
            verdict, why = NO, "; ".join(problems + ([judged[1]] if judged else []))
        else:
            verdict, why = judged if judged else (MATCHES, "")
        rows.append(Row(e.key, e.dataset if has_ds else f"- ({e.dataset})", split, what, normalisers, model, verdict, why))
    return rows


def table(rows: list[Row]) -> str:
    """The Markdown table and the counts line of docs/protocol-audit.md."""
    head = "| row | dataset | split (train/[val/]test) | statistic | normalisers (in / out) | model entry | verdict | why |"
    lines = [head, "|" + " --- |" * 8]
    for r in rows:
        cells = [f"`{r.key}`", r.dataset, r.split, r.statistic, r.normalisers, r.model, r.verdict, r.why or "-"]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    counts = {v: sum(r.verdict == v for r in rows) for v in (MATCHES, PARTLY, NO)}
    lines += ["", f"{len(rows)} rows: {counts[MATCHES]} match, {counts[PARTLY]} match in part, {counts[NO]} cannot be matched."]
    return "\n".join(lines)


def write(doc: Path = DOC) -> None:
    """Replace the table between the page's markers."""
    text = doc.read_text()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:a] + "\n" + table(audit()) + "\n" + text[b:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC.relative_to(REPO)}")
    a = p.parse_args(argv)
    if a.write:
        write()
    else:
        print(table(audit()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
