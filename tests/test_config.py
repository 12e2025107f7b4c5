"""Config: the shipped example loads; unknown keys and bad values are refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]

BASE = """
data_dir = "store"
gold = "gold.jsonl"
[[sources]]
name = "local"
path = "feeds"
"""


def write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(BASE + extra)
    return path


def test_shipped_example_config_loads():
    cfg = load_config(ROOT / "monitor.toml")
    assert cfg.sources and cfg.gold.exists()
    assert all(s.path is None or s.path.exists() for s in cfg.sources)


def test_relative_paths_are_relative_to_the_file(tmp_path):
    cfg = load_config(write(tmp_path, ""))
    assert cfg.data_dir == tmp_path / "store"
    assert cfg.sources[0].path == tmp_path / "feeds"
    assert cfg.retrieval.rrf_k == 60 and cfg.retrieval.k == (1, 3, 5, 10)


def test_env_overrides_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DRIFTWATCH_DATA_DIR", str(tmp_path / "elsewhere"))
    assert load_config(write(tmp_path, "")).data_dir == tmp_path / "elsewhere"


@pytest.mark.parametrize("extra, message", [
    ("[retrieval]\nkk = 3\n", r"unknown key retrieval\.kk"),
    ("[embedder]\ncolour = 'red'\n", r"unknown key embedder\.colour"),
    ("[retrieval]\nk = [1, 'five']\n", r"retrieval\.k\[1\]: expected int"),
    ("[retrieval]\nk = [5, 20]\ncandidate_depth = 10\n", r"retrieval\.candidate_depth: must be >= the largest k"),
    ("[retrieval]\npipelines = ['dense', 'splade']\n", r"retrieval\.pipelines: unknown pipeline 'splade'"),
    ("[chunking]\nsize = 50\noverlap = 50\n", r"chunking\.overlap"),
    ("[bm25]\nb = 2.0\n", r"bm25\.k1: k1 must be >= 0 and b within"),
    ("[fetch]\ntimeout = '10'\n", r"fetch\.timeout: expected float"),
    ("[[sources]]\nname = 'both'\npath = 'x'\nurl = 'https://x.org/feed'\n",
     r"give exactly one of url, path or documents"),
    ("[[sources]]\nname = 'wiki'\npath = 'x'\ndocuments = 'wiki'\n",
     r"sources\[1\] \(wiki\): give exactly one of url, path or documents"),
    ("[[sources]]\nname = 'ftp'\nurl = 'ftp://x.org/feed'\n", r"only http\(s\) URLs"),
    ("[[sources]]\nname = 'local'\npath = 'again'\n", r"duplicate source name 'local'"),
    ("[fetch]\ntimeout = nan\n", r"fetch\.timeout: must be a number of seconds > 0 and <= 600, got nan"),
    ("[fetch]\ntimeout = inf\n", r"fetch\.timeout: must be a number of seconds > 0 and <= 600, got inf"),
    ("[alerts]\nwebhook_timeout = nan\n", r"alerts\.webhook_timeout: must be a number of seconds"),
    ("[alerts]\nwebhook_timeout = 1e9\n", r"alerts\.webhook_timeout: must be a number of seconds"),
    ("[alerts]\nwebhook_retries = 1000000\n", r"alerts\.webhook_retries: must be >= 0 and <= 10"),
    ("[embedder]\ndevice = 'tpu'\n", r"embedder\.device: unknown device 'tpu' \(valid: cpu, cuda, cuda:N, mps\)"),
    ("[embedder]\ndevice = 'cuda:x'\n", r"embedder\.device: unknown device 'cuda:x'"),
    ("[embedder]\ndevice = 'cuda:7'\n", r"embedder\.device: 'cuda:7' needs GPU 7, but this machine has \d+ CUDA"),
    ("[embedder]\ntruncate_dim = 100000\n", r"embedder\.truncate_dim: must be > 0 and <= 8192"),
    ("[alerts]\nwebhook_url = 'ftp://x.org/hook'\n", r"alerts\.webhook_url: must be an http\(s\) URL"),
    ("[drift]\nconfirm_windows = 4\n", r"drift\.confirm_windows: need 1 <= confirm_windows <= confirm_of"),
    ("[drift]\npage_alpha = 0.1\n", r"drift\.page_alpha: need 0 < page_alpha <= alpha \(0\.05\)"),
    # 8 statistics at 99 draws: the smallest Holm-adjusted p is 8 / 100 = 0.08, so nothing could ever drift.
    ("[drift]\npermutations = 99\n", r"drift\.permutations: too few to reach alpha \(0\.05\).*is 0\.08; need more "
                                     r"than 159"),
    ("[drift]\npage_permutations = 400\n", r"drift\.page_permutations: must be >= permutations \(500\)"),
    # 8 statistics at 3000 draws: the smallest Holm-adjusted p is 8 / 3001 = 0.0027, above the page level 0.002.
    ("[drift]\npage_permutations = 3000\n", r"drift\.page_permutations: too few to reach page_alpha \(0\.002\).*"
                                            r"is 0\.0027; need more than 3999"),
])
def test_bad_settings_name_the_key(tmp_path, extra, message):
    path = write(tmp_path, extra)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("data_dir = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(tmp_path / "bad.toml")


def test_config_hash_tracks_what_changes_results(tmp_path):
    a = load_config(write(tmp_path, ""))
    b = load_config(write(tmp_path, "[retrieval]\nrrf_k = 10\n"))
    assert a.config_hash() != b.config_hash()
    assert a.config_hash() == a.replace(data_dir=tmp_path / "other").config_hash()
    # When a drift pages is the alert rule's setting, not the measurement's; the draws on a drifted window are.
    rule = load_config(write(tmp_path, "[drift]\nconfirm_windows = 1\nconfirm_of = 2\npage_alpha = 0.001\n"
                                       "page_permutations = 8000\n"))
    draws = load_config(write(tmp_path, "[drift]\npage_permutations = 8000\n"))
    assert rule.config_hash() == draws.config_hash() != a.config_hash()


def test_url_schemes_are_case_insensitive(tmp_path):
    cfg = load_config(write(tmp_path, "[alerts]\nwebhook_url = 'HTTP://127.0.0.1:9/hook'\n"
                                      "[[sources]]\nname = 'web'\nurl = 'HTTPS://x.org/feed'\n"))
    assert cfg.alerts.webhook_url == "HTTP://127.0.0.1:9/hook" and cfg.sources[1].url == "HTTPS://x.org/feed"


def test_the_settings_within_their_caps_load(tmp_path):
    cfg = load_config(write(tmp_path, "[fetch]\ntimeout = 600\n[alerts]\nwebhook_retries = 10\n"
                                      "[embedder]\ndevice = 'mps'\ntruncate_dim = 64\n"))
    assert (cfg.fetch.timeout, cfg.alerts.webhook_retries, cfg.embedder.device) == (600.0, 10, "mps")


# --- a section that is off constrains nothing (issue 20) -------------------------------------------------------
# Each rule tying one section to another: (the settings of the sections that are on, the dependent section turned
# off, the same section turned on, the refusal then). Off, the config loads; on, the same rule still refuses.
GENERATE = '[generation]\nmode = "generate"\nbase_url = "http://localhost:8000/v1"\nmodel = "m"\n'
CROSS_SECTION_RULES = {
    # the case: no [generation] table at all, its default k = 5 deeper than the candidates
    "generation.k, no [generation] table": (
        "[retrieval]\nk = [1, 3]\ncandidate_depth = 3\n", "", GENERATE,
        r"generation\.k: must be >= 1 and <= retrieval\.candidate_depth \(3\)"),
    "generation.k, mode off": (
        "[retrieval]\nk = [1, 3]\ncandidate_depth = 3\n", '[generation]\nmode = "off"\nk = 10\n',
        GENERATE + "k = 10\n", r"generation\.k: must be >= 1 and <= retrieval\.candidate_depth \(3\)"),
    "generation.k, logged answers (their context is logged too)": (
        "[retrieval]\nk = [1, 3]\ncandidate_depth = 3\n",
        '[generation]\nmode = "logged"\nlogged = "answers.jsonl"\nk = 10\n', GENERATE + "k = 10\n",
        r"generation\.k: must be >= 1 and <= retrieval\.candidate_depth \(3\)"),
    # rerank dropped from the pipelines while the (off) answer layer still names it
    "generation.pipeline, mode off": (
        '[retrieval]\npipelines = ["bm25", "dense"]\n', '[generation]\npipeline = "hybrid_rerank"\n',
        GENERATE + 'pipeline = "hybrid_rerank"\n',
        r"generation\.pipeline: no target 'hybrid_rerank' \(targets: bm25, dense\)"),
}


@pytest.mark.parametrize("on, off, enabled, message", CROSS_SECTION_RULES.values(), ids=CROSS_SECTION_RULES)
def test_a_cross_section_rule_binds_only_when_its_section_is_on(tmp_path, on, off, enabled, message):
    loaded = load_config(write(tmp_path, on + off))
    assert loaded.generation.mode in ("off", "logged")
    path = write(tmp_path, on + enabled)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_the_smallest_retrieval_loads_with_every_optional_section_at_its_defaults(tmp_path):
    cfg = load_config(write(tmp_path, '[retrieval]\npipelines = ["bm25"]\nk = [1]\ncandidate_depth = 1\n'))
    assert (cfg.retrieval.candidate_depth, cfg.generation.mode, cfg.generation.k) == (1, "off", 5)


def test_generation_k_below_one_is_refused_even_when_off(tmp_path):
    """k >= 1 is about k alone (a typo), not about another section: it is checked whatever the mode."""
    with pytest.raises(ConfigError, match=r"generation\.k: must be >= 1"):
        load_config(write(tmp_path, "[generation]\nk = 0\n"))

