"""What the reviewer checked (issue 34), part one: the figures a summary or a claim states, flagged by where the item's
quotes, or else the rest of its source, state the same: quote, source or nowhere. A flag, never a decision, unless the
manifest's figuresMustBeQuoted. The answers are scripted through the loopback provider (tests/provider_server.py)."""

import json
import re

import pytest

import durable_job as dj
from conftest import BOTH, Workspace, openai_workspace

BOILER = "The new boiler saves roughly 8 percent of gas a year.\nIt is serviced on Saturday at 07:00 for $1,200.\n"
QUOTE = "saves roughly 8 percent of gas a year"


def answer(summary: str, *cites: tuple[str, str]) -> str:
    return "answer:" + json.dumps({"itemId": "alpha", "summary": summary, "citations": [{"quote": q, "claim": c} for q, c in cites]})


def flags(result: dict) -> dict:
    return {f["text"]: f["where"] for f in result["figures"]}


@pytest.mark.parametrize(
    "stated, text, same",
    [
        ("18%", "it rose 18 percent", True),
        ("18 per cent", "up 18%", True),
        ("Sat", "open on Saturday", True),
        ("saturdays", "open Sat.", True),
        ("7am", "from 07:00", True),
        ("7:30 p.m.", "at 19:30", True),
        ("noon", "at 12:00", True),
        ("1,000", "1000 units", True),
        ("8.0", "8 units", True),
        ("$1,200", "1200 dollars", True),
        ("1.2 million", "1,200,000 people", True),
        ("Nov 5", "on 5 November 2026", True),
        ("5th of November 2026", "2026-11-05", True),
        ("2026", "on 5 November 2026", True),
        ("9 percent", "roughly 8 percent", False),
        ("7am", "at 7pm", False),
        ("Sat", "on Sunday", False),
        ("5 November 2025", "on 5 November 2026", False),
        ("€1,200", "$1,200", False),
        ("18%", "18 units", False),  # a percentage is not a bare number
    ],
)
def test_a_figure_is_compared_by_what_a_reader_takes_it_to_mean(stated, text, same):
    [(_, key, _)] = dj.figures_in(f"It says {stated}.")
    assert (key in dj.supported_keys([text])) is same, (stated, text, key, dj.supported_keys([text]))


def test_words_that_only_look_like_figures_are_none():
    assert dj.figures_in("We sat down in the sun, item3, v2 and Q3 may wed") == []


@BOTH
def test_a_figure_no_quote_or_source_states_is_flagged_nowhere_everywhere_the_reviewer_looks(ws, provider, tmp_path):
    openai_workspace(ws, provider, sources={"alpha": BOILER})
    provider.behave(
        answer(
            "It saves about 9 percent of gas on Sat at 7am.",
            (QUOTE, "The boiler saves about 9 percent."),
            ("serviced on Saturday", "Serviced for $1,200."),
        )
    )
    ws.start().ok()
    out = ws.run("inspect", "--html", str(tmp_path / "review.html")).ok()
    [result] = out["results"]
    assert result["figures"] == [
        {"text": "9 percent", "where": "nowhere"},
        {"text": "Sat", "where": "quote"},
        {"text": "7am", "where": "source"},
        {"text": "$1,200", "where": "source"},
    ]
    text = ws.run("inspect", "--text").stdout
    assert "claim alpha.1: The boiler saves about 9 percent. [figures: 9 percent: nowhere]" in text
    assert "[figures: 9 percent: nowhere, Sat: quote, 7am: source]" in text
    page = (tmp_path / "review.html").read_text()
    claim = re.search(r"<li id='c0-0'>.*?</li>", page).group(0)
    assert "The boiler saves about 9 percent." in claim and "<span class='pill bad fig'>9 percent: nowhere</span>" in claim
    assert "<span class='pill wait fig'>$1,200: source</span>" in re.search(r"<li id='c0-1'>.*?</li>", page).group(0)
    [row] = ws.run("jobs", *(["--store", ws.store] if ws.store else ["--root", ws.root])).ok()["jobs"]
    assert row["figures"] == {"quote": 1, "source": 2, "nowhere": 1}
    assert ws.run("verify").ok()["ok"]  # the flags are what validating the journaled answer again gives


def test_an_answer_whose_figures_its_quotes_state_has_none_flagged(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": BOILER})
    provider.behave(answer("It saves roughly 8 percent of gas.", (QUOTE, "8% a year, roughly.")))
    [result] = ws.start().ok()["results"]
    assert result["status"] == "validated"
    assert flags(ws.run("inspect").ok()["results"][0]) == {"8 percent": "quote", "8%": "quote"}


@BOTH
def test_with_figures_must_be_quoted_a_figure_found_nowhere_fails_the_item_naming_it(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": BOILER}, figuresMustBeQuoted=True)
    provider.behave(answer("It saves about 9 percent of gas.", (QUOTE, "Saves gas every year.")))
    [result] = ws.start().ok()["results"]
    assert result["status"] == "failed"
    inspected = ws.run("inspect").ok()["results"][0]
    assert inspected["reason"].startswith("figure '9 percent' in the summary is nowhere in the source"), inspected
    assert "figures" not in inspected
    assert ws.run("verify").ok()["ok"]


def test_with_figures_must_be_quoted_a_figure_only_in_the_source_is_still_a_flag(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": BOILER}, figuresMustBeQuoted=True)
    provider.behave(answer("Serviced at 7am.", (QUOTE, "It saves gas.")))
    [result] = ws.start().ok()["results"]
    assert result["status"] == "validated" and flags(ws.run("inspect").ok()["results"][0]) == {"7am": "source"}


@pytest.mark.parametrize("key", ["figuresMustBeQuoted", "reviewChecksEveryClaim"])
@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_bad_value_of_the_new_manifest_keys_is_a_hold(ws, key, value):
    ws.write_manifest(**{key: value})
    ws.start().held("ManifestError", f"Manifest {key} must be true or false")


POINTS = ["after-seal", "after-ledger", "after-validate", "before-review", "after-decide", "after-decision-row"]


@pytest.mark.parametrize("point", POINTS)
def test_the_flags_survive_a_kill_at_every_crash_point(tmp_path, point):
    """Fake mode's answer quotes the source's first line: its figures are all in its quote, saved with the result."""
    ws = Workspace(tmp_path)
    ws.write_manifest(sources={"alpha": "Opens Sat at 7am, 18% off, from 5 November 2026.\n"})
    crash = {"DURABLE_JOB_FAKE_CRASH": point}
    if point in ("after-seal", "after-ledger", "after-validate", "before-review"):
        assert ws.start(env=crash).code == dj.CRASH_POINTS[point]
        ws.run("resume").ok()
    else:
        ws.start().ok()
        assert ws.run("decide", "--decision", "accept", "--reviewer", "D", "--reason", "r", env=crash).code == dj.CRASH_POINTS[point]
        ws.run("resume").ok()
    result = ws.run("inspect").ok()["results"][0]
    assert flags(result) == {"Sat": "quote", "7am": "quote", "18%": "quote", "5 November 2026": "quote"}
    assert ws.run("verify").ok()["ok"]
