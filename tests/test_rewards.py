"""The reward functions on realistic and adversarial completions."""

from fractions import Fraction

import pytest

from grpolab.common.tracks import get_track
from grpolab.settings.lab_settings import SettingsRefused, resolve_settings
from grpolab.task.reward_choice import resolve_reward
from grpolab.task.rewards import (
    CONTROL_REWARDS,
    REWARD_COLUMNS,
    REWARD_FUNCS,
    extract_final_number,
    format_reward,
    numeric_reward,
    random_reward,
)

# (completion, answer, numeric_reward, format_reward)
CASES = [
    # the shape the prompts ask for
    ("<answer>42</answer>", "42", 1.0, 1.0),
    ("<answer> 42 </answer>", "42", 1.0, 1.0),
    ("<answer>\n42\n</answer>", "42", 1.0, 1.0),
    ("<answer>41</answer>", "42", 0.0, 1.0),
    ("The sum is 40 + 2 = 42. <answer>42</answer>", "42", 1.0, 1.0),
    ("<answer>42</answer> I hope that helps!", "42", 1.0, 1.0),
    ("<answer>42</answer> (not 41)", "42", 1.0, 1.0),  # text after the tag: the tag still wins
    # several numbers, the last one decides
    ("12 + 30 = 42, so the answer is 43", "42", 0.0, 0.0),
    ("First 43, then corrected: 42", "42", 1.0, 0.0),
    ("answer: 42.", "42", 1.0, 0.0),
    ("The answer is 42 apples", "42", 1.0, 0.0),
    ("Total: $1,200.50", "1200.5", 1.0, 0.0),
    ("The distance is 12 km", "12", 1.0, 0.0),
    ("1,234", "1234", 1.0, 0.0),
    ("<answer>1,234</answer>", "1234", 1.0, 1.0),
    ("3,4,5", "5", 1.0, 0.0),
    # the tag wins over numbers elsewhere
    ("I think it's 42 <answer>7</answer>", "42", 0.0, 1.0),
    ("<answer>7</answer> or maybe 42", "42", 0.0, 1.0),
    # signs
    ("<answer>-5</answer>", "-5", 1.0, 1.0),
    ("<answer>\u22125</answer>", "-5", 1.0, 1.0),  # unicode minus
    ("<answer>+5</answer>", "5", 1.0, 1.0),
    ("<answer>-0</answer>", "0", 1.0, 1.0),
    ("from 3-4 we get 4", "4", 1.0, 0.0),
    ("3-4", "-4", 0.0, 0.0),  # a range or a subtraction, not a negative number
    # decimals, fractions, exponents, LaTeX
    ("<answer>0.5</answer>", "1/2", 1.0, 1.0),
    ("<answer>1/2</answer>", "0.5", 1.0, 1.0),
    ("<answer>3/4</answer>", "0.75", 1.0, 1.0),
    ("<answer>.5</answer>", "0.5", 1.0, 1.0),
    ("<answer>42.0</answer>", "42", 1.0, 1.0),
    ("<answer>1e3</answer>", "1000", 1.0, 1.0),
    ("<answer>0.1</answer>", "0.10", 1.0, 1.0),
    ("<answer>0.3333</answer>", "1/3", 0.0, 1.0),
    ("So the answer is \\boxed{42}.", "42", 1.0, 0.0),
    ("\\boxed{42} and then 17", "42", 1.0, 0.0),
    ("\\boxed{\\frac{3}{4}}", "0.75", 1.0, 0.0),
    # broken or gamed tags
    ("<answer></answer> 42", "42", 0.0, 0.0),  # an empty tag: the tag wins, and it holds nothing
    ("<answer>5</answer><answer>42</answer>", "42", 1.0, 0.0),  # two tags: the last counts, format fails
    ("<answer><answer>42</answer></answer>", "42", 1.0, 0.0),  # nested
    ("<answer>42", "42", 1.0, 0.0),  # cut off before the closing tag: falls back to the last number
    ("<answer>42 apples</answer>", "42", 1.0, 0.0),
    ("<answer>41 or 42</answer>", "42", 1.0, 0.0),
    ("<answer>forty-two</answer>", "42", 0.0, 0.0),
    ("<ANSWER>42</ANSWER>", "42", 1.0, 0.0),  # tags are case-sensitive; the number still counts
    # no number, odd input
    ("I don't know.", "42", 0.0, 0.0),
    ("", "42", 0.0, 0.0),
    (None, "42", 0.0, 0.0),
    ("<answer>3/0</answer>", "3", 0.0, 1.0),
    ("<answer>1e999999999</answer>", "1", 0.0, 1.0),
    ("9" * 20000, "9", 0.0, 0.0),
    ("<answer>42</answer>", None, 0.0, 1.0),
    ("<answer>42</answer>", "not a number", 0.0, 1.0),
    # chat-message form
    ([{"role": "assistant", "content": "<answer>42</answer>"}], "42", 1.0, 1.0),
    ([{"role": "assistant", "content": "it is 41"}], "42", 0.0, 0.0),
    ([{"role": "assistant", "content": [{"type": "text", "text": "<answer>42</answer>"}]}], "42", 1.0, 1.0),
    ([{"role": "assistant", "content": None}], "42", 0.0, 0.0),
    ([], "42", 0.0, 0.0),
]


@pytest.mark.parametrize(("completion", "answer", "numeric", "fmt"), CASES, ids=[repr(c[0])[:40] for c in CASES])
def test_reward_table(completion, answer, numeric, fmt):
    assert numeric_reward([completion], answer=[answer]) == [numeric]
    assert format_reward([completion]) == [fmt]


def test_batch_aligns_each_answer_with_its_own_completion():
    completions = ["<answer>3</answer>", "<answer>5</answer>", "7"]
    answers = ["3", "4", "7"]
    assert numeric_reward(completions, answer=answers, prompts=["p"] * 3, trainer_state=None) == [1.0, 0.0, 1.0]
    # TRL hands over a batch in any order: the same pairs in another order score the same, pair by pair.
    order = [2, 0, 1]
    assert numeric_reward([completions[i] for i in order], answer=[answers[i] for i in order]) == [1.0, 1.0, 0.0]
    # Shifted by one, no completion meets its answer: a reward that ignored the pairing could not tell.
    assert numeric_reward(completions, answer=answers[1:] + answers[:1]) == [0.0, 0.0, 0.0]


def test_extract_final_number_is_exact():
    assert extract_final_number("<answer>0.1</answer>") == Fraction(1, 10)
    assert extract_final_number("$1,200.50") == Fraction(240100, 200)
    assert extract_final_number("nothing here") is None


def test_registry_matches_the_functions():
    assert REWARD_FUNCS == {"numeric_reward": numeric_reward, "format_reward": format_reward}
    assert REWARD_COLUMNS == {"numeric_reward": ["answer"], "format_reward": []}
    assert set(REWARD_COLUMNS) == set(REWARD_FUNCS)


def test_the_control_is_named_like_a_built_in_reward_but_is_not_one_of_the_labs():
    """`--reward-weights random_reward=1` (the learning benchmark's control) needs no module path of the lab's."""
    assert (
        CONTROL_REWARDS == {"random_reward": random_reward} and "random_reward" not in REWARD_FUNCS
    )  # the verl export inlines only REWARD_FUNCS
    assert resolve_reward("random_reward") is random_reward and resolve_reward("numeric_reward") is numeric_reward
    assert resolve_settings(get_track("c"), overrides={"reward_weights": "random_reward=1"}).reward_weights == {
        "random_reward": 1.0
    }
    with pytest.raises(SettingsRefused, match="a control \\(random_reward\\)"):
        resolve_settings(get_track("c"), overrides={"reward_weights": "random=1"})
