"""Arms as the benchmark runs them (llmhost.bench.arms), on worked specs: a user arm whole, settings and launch flags
mixed in any order split into what the restart takes, a setting flag that lacks its value, consecutive arms that
share a server boot, and each refusal in one whole line."""
from __future__ import annotations

import pytest

from llmhost.bench import arms
from llmhost.bench.arms import Arm, ArmError


def test_a_user_arm_is_whole_and_coloured_by_its_place():
    assert arms.parse_user_arm("mine=--page-size 16") == Arm(
        "mine", "mine", arms._USER_COLORS[0], ("--page-size", "16"), "User arm: baseline + --page-size 16")
    assert arms.parse_user_arm("x=--enable-mixed-chunk", 6).color == arms._USER_COLORS[1]


def test_settings_and_flags_in_any_order_split_into_what_the_restart_takes():
    arm = arms.parse_user_arm("mix=--page-size 16 FREEZE_GC=off SHARED_PREFIX_DECODE=off "
                              "--chunked-prefill-size 4096 --enable-mixed-chunk --tp-size=2")
    plain, settings = arms.server_overrides(arm)
    assert plain == ["--page-size", "16", "--enable-mixed-chunk"]
    assert settings == {"FREEZE_GC": "off", "SHARED_PREFIX_DECODE": "off", "CHUNKED_PREFILL_SIZE": "4096",
                        "TP_SIZE": "2"}


@pytest.mark.parametrize("flags", ["--chunked-prefill-size", "--chunked-prefill-size --page-size 16"])
def test_a_setting_flag_without_its_value_is_refused(flags):
    with pytest.raises(ArmError) as exc:
        arms.parse_user_arm(f"a={flags}")
    assert str(exc.value) == "arm a: --chunked-prefill-size needs a value"


def test_consecutive_arms_with_the_same_server_share_a_boot():
    a1 = arms.parse_user_arm("a1=--page-size 16")
    a2 = arms.parse_user_arm("a2=--page-size 16")
    b1 = arms.parse_user_arm("b1=FREEZE_GC=off")
    b2 = arms.parse_user_arm("b2=FREEZE_GC=off")
    base = arms.REGISTRY["baseline"]
    groups = arms.boots([base, a1, a2, b1, b2, base])
    assert [[a.name for a in g] for g in groups] == [["baseline"], ["a1", "a2"], ["b1", "b2"], ["baseline"]]


def test_each_refusal_is_one_whole_line():
    with pytest.raises(ArmError) as exc:
        arms.select(["baseline", "nope", "gone"], [])
    assert str(exc.value) == "unknown arm nope, gone (known: baseline, no-prefix-cache, fp8-kv, page-16, triton)"
    with pytest.raises(ArmError) as exc:
        arms.select(None, ["triton=--page-size 16"])
    assert str(exc.value) == ("arm triton is defined twice (built-in arms: baseline, no-prefix-cache, fp8-kv, "
                              "page-16, triton)")
    with pytest.raises(ArmError) as exc:
        arms.parse_user_arm("a=page 16")
    assert str(exc.value) == ("arm a: flags must start with a launch_server option such as --page-size, or a "
                              "setting: " + ", ".join(f"{k}=..." for k in arms.ARM_LIFECYCLE_SETTINGS))
    with pytest.raises(ArmError) as exc:
        arms.parse_user_arm("a=--page-size '16")
    assert str(exc.value).startswith("arm a: cannot split flags \"--page-size '16\" (")
    with pytest.raises(ArmError) as exc:
        arms.parse_user_arm("Bad Name=--page-size 16")
    assert str(exc.value) == "bad arm 'Bad Name=--page-size 16': expected NAME=\"--flag value\" with NAME like my-arm"
    with pytest.raises(ArmError) as exc:
        arms.parse_user_arm("a=NOT_A_SETTING=1")
    assert str(exc.value) == ("arm a: NOT_A_SETTING is not a setting an arm can change (arm settings: "
                              + ", ".join(arms.ARM_LIFECYCLE_SETTINGS) + ")")
    with pytest.raises(ArmError) as exc:
        arms.parse_user_arm("a=SERVER_ENV=HF_TOKEN=x")
    assert str(exc.value) == ("arm a: SERVER_ENV sets HF_TOKEN, a secret, and arms are recorded with the results — "
                              "keep it in config.local.env's SERVER_ENV")
