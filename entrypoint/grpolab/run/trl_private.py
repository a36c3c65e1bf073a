"""What the lab still takes from TRL's GRPOTrainer below its public surface, in one place: read from TRL 1.16.0.

Everything else goes through what TRL offers in public: GRPOConfig; the trainer's callbacks (transformers'
TrainerCallback: each step's time and record, and when the vLLM sync ledger reads TRL's check of the sampled tokens);
`rollout_func` (the llama.cpp paths); and the vLLM weight-sync client, `trainer.vllm_generation.sync_weights` (how
long each sync takes, and which optimiser step's weights vLLM holds: the lab no longer reads `_last_loaded_step`).

What is left has no public hook in TRL 1.16.0. The table, as read from that version's trl/trainer/grpo_trainer.py
(OVERRIDDEN_METHODS, CALLED_BY and READ_ATTRIBUTES below hold the same, for the test):

  GRPOTrainer.                        kind        parameters, or what sets it      where TRL uses it
  _generate                           overridden  self, prompts                    _generate_and_score_completions
  _get_per_token_logps_and_entropies  overridden  self, model, input_ids,          _generate_and_score_completions
                                                  attention_mask, logits_to_keep,  (no grad: old_per_token_logps,
                                                  batch_size, compute_entropy,     the reference model's);
                                                  compute_aux_loss, pixel_values,  _compute_loss (with grad)
                                                  image_grid_thw, num_images,
                                                  pixel_attention_mask,
                                                  spatial_shapes, num_tiles,
                                                  image_sizes, token_type_ids,
                                                  mm_token_type_ids,
                                                  image_position_ids
  _metrics                            read        __init__: {"train":              each generation appends its
                                                  defaultdict(list), "eval": ...}  sampling/sampling_logp_
                                                                                   difference/max; log clears it

Why no public hook serves each:
- `_generate`: the lab times producing completions (the weight sync taken out) and, after a generation that
  succeeded, runs the vLLM sync ledger's probe. No callback fires around generation (on_step_begin and on_step_end
  wrap the whole step, update included), the probe must run before the optimiser step moves the policy, and
  `rollout_func` replaces TRL's generation rather than observing it.
- `_get_per_token_logps_and_entropies`: the lab times its no-grad calls, the old_per_token_logps pass that vLLM's
  importance-sampling correction adds. TRL runs it inside _generate_and_score_completions with no hook around it.
- `_metrics`: the vLLM sync ledger reads the latest generation's sampling/sampling_logp_difference/max at
  on_step_end (a public hook; the value has none). on_log hands over the mean over logging_steps steps instead of
  each generation's own value.

tests/test_trl_private.py reads the installed TRL against OVERRIDDEN_METHODS, CALLED_BY and READ_ATTRIBUTES and fails
naming the method or attribute and TRL_VERSION_READ when a TRL upgrade moves one of them; a lock pinning another
TRL than TRL_VERSION_READ fails it too, until these names are read again from that TRL.
"""

from __future__ import annotations

import time

from trl import GRPOTrainer

TRL_VERSION_READ = "1.16.0"

# Each overridden method's parameters, in order, as read from TRL_VERSION_READ's GRPOTrainer.
OVERRIDDEN_METHODS = {
    "_generate": ("self", "prompts"),
    "_get_per_token_logps_and_entropies": (
        "self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
        "compute_aux_loss", "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
        "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
    ),
}
# The GRPOTrainer method whose own code calls each override: an override TRL no longer calls would silently count 0 s.
CALLED_BY = {
    "_generate": "_generate_and_score_completions",
    "_get_per_token_logps_and_entropies": "_generate_and_score_completions",
}
# Each private attribute read: lines of GRPOTrainer's source that set it and fill what the lab reads of it.
READ_ATTRIBUTES = {
    "_metrics": (
        'self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}',
        'self._metrics[mode]["sampling/sampling_logp_difference/max"].append(',
        "self._metrics[mode].clear()",
    ),
}


class TimedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer counting the seconds spent producing completions, syncing weights into vLLM, checking the sync and
    in TRL's no-grad log-probability pass, so each step splits into those, reward and update (run/training.py's
    StepRecord). sync_seconds is counted by run/training.py's time_weight_syncs, around TRL's weight-sync client."""

    generation_seconds = 0.0
    sync_seconds = 0.0
    sync_check_seconds = 0.0
    old_logprobs_seconds = 0.0
    rollout_ledger = None  # set for vLLM colocate: after each generation it records (and checks) the synced policy

    def _generate(self, prompts):
        started = time.perf_counter()
        sync_before = self.sync_seconds  # TRL syncs inside _generate, before the engine generates
        try:
            generated = super()._generate(prompts)
        finally:
            seconds = time.perf_counter() - started - (self.sync_seconds - sync_before)
            self.generation_seconds += seconds
        # After a generation that succeeded only (an engine that just failed is not asked again), and outside
        # the timing: the sync check is not generation.
        if hasattr(self.rollout_ledger, "after_generation"):
            started = time.perf_counter()
            try:
                self.rollout_ledger.after_generation(self, seconds)
            finally:
                self.sync_check_seconds += time.perf_counter() - started
        return generated

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        # Without gradients this is TRL's old_per_token_logps pass (_generate_and_score_completions): with vLLM
        # and vllm_importance_sampling_correction (TRL's default) one more forward of every sequence, a cost
        # in-process runs do not pay, so it is counted apart from the update.
        import torch

        if torch.is_grad_enabled():
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)
        started = time.perf_counter()
        try:
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)
        finally:
            self.old_logprobs_seconds += time.perf_counter() - started


def logged_train_metrics(trainer) -> dict:
    """TRL's training metrics since its last log (GRPOTrainer._metrics["train"]): one list per metric, a value
    appended per generation. GRPOTrainer.log clears them, and transformers calls it after on_step_end, so a
    callback's on_step_end still sees the step's own values."""
    return trainer._metrics["train"]
