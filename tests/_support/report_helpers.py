"""Small results files for the report and publish tests."""

from __future__ import annotations

import base64

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
