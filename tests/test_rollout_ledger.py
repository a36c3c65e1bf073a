"""The staleness ledger and the llama.cpp rollout_func's refresh logic, with a fake sampler (no llama.cpp needed)."""

from types import SimpleNamespace

import pytest
from grpolab.rollouts.ledger import RolloutLedger
from grpolab.rollouts.llamacpp import LlamaCppRollout

# --- the ledger and refresh ----------------------------------------------------------------------------


def test_ledger_lag_and_summary():
    ledger = RolloutLedger(refresh_every=0, engine="fake")
    for step in range(4):
        ledger.record(trainer_step=step, policy_version=0, completions=8)
    assert ledger.lags == [0, 1, 2, 3]
    summary = ledger.summary()
    assert summary["stale"] is True and summary["max_lag_steps"] == 3 and summary["rollout_batches"] == 4
    assert summary["mean_lag_steps"] == 1.5 and summary["refreshes"] == 0
    assert "STALE" in ledger.describe()


def test_empty_and_on_policy_ledger_is_not_stale():
    assert RolloutLedger().summary()["stale"] is False
    ledger = RolloutLedger()
    ledger.record(3, 3)
    assert not ledger.stale and ledger.max_lag_steps == 0


class FakeSampler:
    engine = "fake"

    def __init__(self):
        self.loaded = []
        self.gguf_path = None

    def load(self, path):
        self.loaded.append(path)
        self.gguf_path = path

    def close(self):
        self.closed = True

    def sample_batch(self, prompt_ids, max_tokens, temperature, stop_ids=()):
        return [[5, 6, stop_ids[0]] for _ in prompt_ids], [[-0.1, -0.2, -0.3] for _ in prompt_ids]


class FakeTokenizer:
    eos_token_id = 2

    def apply_chat_template(
        self, conversation, add_generation_prompt, tokenize, return_dict, chat_template=None, **kwargs
    ):
        assert add_generation_prompt and tokenize and return_dict
        return {"input_ids": [[1, len(m[0]["content"])] for m in conversation]}


def fake_trainer(step):
    model = SimpleNamespace(training=True, train=lambda mode=True: None)
    return SimpleNamespace(state=SimpleNamespace(global_step=step), model=model)


def run_steps(rollout, steps):
    prompts = [[{"role": "user", "content": "What is 1 plus 2?"}]] * 4
    for step in range(steps):
        out = rollout(prompts, fake_trainer(step))
        assert set(out) == {"prompt_ids", "completion_ids", "logprobs"}
        assert len(out["completion_ids"]) == len(prompts) == len(out["logprobs"])
    return rollout.ledger


@pytest.fixture
def no_export(monkeypatch, tmp_path):
    exports = []

    def fake_export(model, path, **kwargs):
        exports.append(path)
        path.write_bytes(b"GGUF\x03\x00\x00\x00")
        return path

    monkeypatch.setattr("grpolab.model.gguf.export_gguf", fake_export)
    return exports


def test_without_refresh_the_lag_grows_every_step(no_export, tmp_path):
    rollout = LlamaCppRollout(FakeSampler(), FakeTokenizer(), max_completion_length=4, refresh_every=0)
    ledger = run_steps(rollout, 6)
    assert ledger.lags == [0, 1, 2, 3, 4, 5]
    assert ledger.summary()["stale"] and ledger.max_lag_steps == 5 and not no_export


@pytest.mark.parametrize("K", [1, 2, 3])
def test_refresh_every_k_keeps_the_lag_below_k(no_export, tmp_path, K):
    sampler = FakeSampler()
    rollout = LlamaCppRollout(sampler, FakeTokenizer(), max_completion_length=4, refresh_every=K, export_dir=tmp_path)
    ledger = run_steps(rollout, 7)
    assert max(ledger.lags) <= K - 1 < K
    assert ledger.lags == [step % K for step in range(7)]
    assert [r.trainer_step for r in ledger.refreshes] == [s for s in range(1, 7) if s % K == 0]
    assert sampler.loaded == no_export and len(no_export) == len(ledger.refreshes)
    # one refreshed file on disk at a time
    assert len(list(tmp_path.glob("policy-step*.gguf"))) == 1
    assert ledger.summary()["stale"] is (K > 1)


def test_close_removes_the_gguf_copies(no_export, tmp_path):
    sampler = FakeSampler()
    rollout = LlamaCppRollout(
        sampler, FakeTokenizer(), max_completion_length=4, refresh_every=1, export_dir=tmp_path / "gguf"
    )
    (tmp_path / "gguf").mkdir()
    run_steps(rollout, 3)
    assert list((tmp_path / "gguf").glob("*.gguf"))
    rollout.close()
    assert sampler.closed and not (tmp_path / "gguf").exists()


def test_rollout_sets_the_ledger_on_the_trainer(no_export):
    rollout = LlamaCppRollout(FakeSampler(), FakeTokenizer(), max_completion_length=4)
    trainer = fake_trainer(0)
    rollout([[{"role": "user", "content": "x"}]] * 2, trainer)
    assert trainer.rollout_ledger is rollout.ledger


def test_rollout_rejects_bad_arguments():
    with pytest.raises(ValueError, match="export_dir"):
        LlamaCppRollout(FakeSampler(), FakeTokenizer(), refresh_every=2)
    with pytest.raises(ValueError, match="temperature"):
        LlamaCppRollout(FakeSampler(), FakeTokenizer(), temperature=0)
