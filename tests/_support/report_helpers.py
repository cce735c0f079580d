"""Small results files for the report and publish tests."""

from __future__ import annotations

import base64
from html.parser import HTMLParser
from typing import Any

from opflow.records import Results

PNG = base64.b64decode(  # a valid 1 x 1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def results(dataset: str, model: str, run_hash: str, mean: float, *, zero_shot: dict | None = None, plot: str | None = None, resolution: str = "85") -> Results:
    return Results(
        dataset=dataset, model=model, arch="ono", view={"kind": "grid"}, run={"hash": run_hash}, run_hash=run_hash,
        data_files={}, training_data_fingerprint=None, parameters=1_227_649, epochs=500, train_time_s=5400.0, train_device="cuda:0",
        train_device_name="NVIDIA H100", train_world_size=1, final_train_loss=0.01, n_test=200, resolution=resolution,
        metrics={"rel_l2_mean": mean, "rel_l2_median": 0.9 * mean, "rel_l2_max": 3 * mean, "per_channel": {},
                 "rel_l2_normalised_mean": 2 * mean, "rel_l2_normalised_median": 1.8 * mean, "rel_l2_normalised_max": 6 * mean},
        zero_shot=zero_shot or {}, eval_sets={}, inference_time_per_sample_s=1e-3, inference={}, peak_memory={}, device="cuda:0",
        device_name="NVIDIA H100", threads=1, versions={}, git_commit=None, created="2026-01-01T00:00:00+00:00", plot=plot,
        model_file=f"quick/models/{dataset}_{model}/model.pt",
    )  # fmt: skip


class Page(HTMLParser):
    """The report's ``index.html`` as data: the rows of its tables (their data attributes and cells by
    column label), the summary tables' counts, its links and its visible text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        """One per row of the two row tables: ``attrs`` (status, paper, model, dataset) and ``cells`` (label -> text)."""
        self.summary: dict[str, dict[str, dict[str, int]]] = {}
        """Table id (by-paper, by-model) -> name -> status key (and 'published') -> count."""
        self.links: list[str] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._row: dict[str, Any] | None = None
        self._cell: tuple[str, list[str]] | None = None
        self._skip = 0
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag in ("style", "script"):
            self._skip += 1
        elif tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table in ("ours", "not-run") and "status" in {k.removeprefix("data-") for k in a}:
            self._row = {"attrs": {k.removeprefix("data-"): v for k, v in a.items() if k.startswith("data-")}, "cells": {}}
        elif tag == "tr" and self._table in ("by-paper", "by-model") and "data-name" in a:
            self._row = {"name": a["data-name"], "counts": {}}
        elif tag == "td" and self._row is not None:
            self._cell = (a.get("data-label") or a.get("data-status", ""), [])
        elif tag == "a" and "href" in a:
            self.links.append(a["href"])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script"):
            self._skip -= 1
        elif tag == "td" and self._cell is not None and self._row is not None:
            label, parts = self._cell
            text = " ".join("".join(parts).split())
            if "cells" in self._row:
                self._row["cells"][label] = text
            elif label:
                self._row["counts"][label] = int(text)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if "cells" in self._row:
                self.rows.append(self._row)
            else:
                self.summary.setdefault(str(self._table), {})[self._row["name"]] = self._row["counts"]
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell[1].append(data)
