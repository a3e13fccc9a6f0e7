"""Post-use & Pre-cut parts on tiny inputs: the token cache (LIFO stacks, eviction order, Eq. 7 runs) and the
Q-learning controller (states, the update rule, warm-up, checkpointing)."""

from __future__ import annotations

import pytest

from methods.holistic.precut import CONTINUE, STOP, QController
from methods.holistic.token_cache import TokenCache


# -- token cache -------------------------------------------------------------------------------------------------
def test_stack_is_last_in_first_out_and_refreshes():
    c = TokenCache(beta=3, per_key=3)
    for p in [(1, 2), (3, 4), (5, 6)]:
        c.push(9, p)
    assert c.fetch(9, 2) == [(5, 6), (3, 4)]
    c.push(9, (1, 2))  # already stacked: back on top, not duplicated
    assert c.fetch(9, 5) == [(1, 2), (5, 6), (3, 4)]


def test_full_stack_drops_its_oldest_phrase():
    c = TokenCache(beta=3, per_key=2)
    for p in [(1,), (2,), (3,)]:
        c.push(0, p)
    assert c.fetch(0, 5) == [(3,), (2,)]


def test_phrases_are_cut_to_beta_and_short_ones_refused():
    c = TokenCache(beta=2, min_phrase=2)
    assert c.push(0, [1, 2, 3])
    assert not c.push(0, [7])
    assert c.fetch(0, 5) == [(1, 2)]
    assert c.fetch(42, 5) == []


def test_full_pool_evicts_the_least_used_key_then_the_oldest():
    c = TokenCache(beta=2, max_keys=2)
    c.push(1, (10,))
    c.push(2, (20,))
    c.used(1)
    c.push(3, (30,))  # key 2 was never used: evicted, although key 1 is older
    assert sorted(c.stacks) == [1, 3]
    c.used(3)
    c.push(4, (40,))  # 1 and 3 used once each: the one touched longest ago (1) goes
    assert sorted(c.stacks) == [3, 4]


def test_push_runs_stores_useful_tokens_after_a_mismatch():
    c = TokenCache(beta=5)
    # root 0, drafts 1 2 3 4 5: position 3 wrong, positions 1-2 and 4-5 useful (Eq. 7 counts both runs)
    c.push_runs([0, 1, 2, 3, 4, 5], [False, True, True, False, True, True])
    assert c.fetch(0, 5) == [(1, 2)]
    assert c.fetch(1, 5) == [(2,)]
    assert c.fetch(3, 5) == [(4, 5)]
    assert c.fetch(4, 5) == [(5,)]
    assert c.fetch(2, 5) == []  # 3 was not useful: nothing follows 2


def test_push_text_adds_only_phrases_that_reach_the_new_text():
    c = TokenCache(beta=2)
    c.push_text([1, 2, 3, 4, 5], start=4)  # only 5 is new: phrases ending at index >= 4
    assert {k: c.fetch(k, 5) for k in c.stacks} == {3: [(4, 5)]}
    c.push_text([1, 2, 3, 4, 5], start=0)
    assert c.fetch(1, 5) == [(2, 3)] and c.fetch(2, 5) == [(3, 4)]


def test_cache_state_round_trip_keeps_order_and_uses():
    c = TokenCache(beta=3, max_keys=2)
    c.push(1, (2, 3))
    c.push(1, (4,))
    c.push(5, (6,))
    c.used(1)
    d = TokenCache(beta=3, max_keys=2)
    d.load_state_dict(c.state_dict())
    assert d.fetch(1, 5) == c.fetch(1, 5) and d.uses == c.uses
    d.push(7, (8,))  # 5 is unused: evicted in both
    c.push(7, (8,))
    assert sorted(d.stacks) == sorted(c.stacks) == [1, 7]


# -- Q controller ------------------------------------------------------------------------------------------------
def test_state_bins_the_confidence_product():
    q = QController(max_calls=4, conf_edges=(0.5, 0.1))
    assert q.state(1, 0.9) == (1, 0)
    assert q.state(2, 0.3) == (2, 1)
    assert q.state(9, 0.01) == (4, 2)  # calls capped


def test_q_init_continues_until_learned_otherwise():
    q = QController(max_calls=3, epsilon=0.0, warmup_steps=0)
    q.begin()
    assert q.decide(1, 0.9, 1)
    assert q.values(q.state(1, 0.9)) == [0.0, 0.01]


def test_update_rule_is_bellman_backwards_through_the_episode():
    q = QController(max_calls=5, conf_edges=(0.5,), target_cost=2.0, gamma=0.5, alpha=0.5, epsilon=0.0,
                    q_init=0.01, warmup_steps=0)
    q.begin()
    assert q.decide(1, 0.9, 1)  # s0 = (1, 0): continue
    q.q[(2, 0)] = [0.2, 0.0]  # make s1 stop
    assert not q.decide(2, 0.8, 2)  # s1 = (2, 0): stop
    r = q.learn([0, 1, 2], calls=2)  # 2 useful / (2 calls + 2) - 1
    assert r == pytest.approx(-0.5)
    assert q.q[(2, 0)][STOP] == pytest.approx(0.2 + 0.5 * (-0.5 - 0.2))  # -0.15
    # s0 continue moves toward gamma * max Q(s1) after s1's update: 0.5 * max(-0.15, 0.0) = 0
    assert q.q[(1, 0)][CONTINUE] == pytest.approx(0.01 + 0.5 * (0.0 - 0.01))
    assert q.steps == 1 and q.episode == []


def test_direct_credit_gives_every_decision_of_the_draft_the_steps_reward():
    # the episode above with credit="direct": s0's CONTINUE moves toward r itself, where discounted credit moved
    # it toward gamma * max Q(s1) = 0, so a penalised draft now makes its first decision look worse too
    q = QController(max_calls=5, conf_edges=(0.5,), target_cost=2.0, gamma=0.5, alpha=0.5, epsilon=0.0,
                    q_init=0.01, warmup_steps=0, credit="direct")
    q.begin()
    assert q.decide(1, 0.9, 1)
    q.q[(2, 0)] = [0.2, 0.0]
    assert not q.decide(2, 0.8, 2)
    r = q.learn([0, 1, 2], calls=2)
    assert q.q[(2, 0)][STOP] == pytest.approx(0.2 + 0.5 * (r - 0.2))
    assert q.q[(1, 0)][CONTINUE] == pytest.approx(0.01 + 0.5 * (r - 0.01))
    with pytest.raises(ValueError, match="credit must be one of discounted, direct"):
        QController(credit="monte-carlo")


def test_warm_up_teaches_stop_values_at_every_visited_state():
    q = QController(max_calls=5, conf_edges=(0.5,), target_cost=1.0, alpha=1.0, epsilon=0.0, warmup_steps=1)
    q.begin()
    for calls in (1, 2, 3):
        assert q.decide(calls, 0.9, calls)  # runs to the maximum: every decision continues
    q.learn([0, 1, 1, 1], calls=4)
    # stopping after 1 call and 1 token would have earned 1 / (1 + 1) - 1; after 2 calls 1 / 3 - 1
    assert q.q[(1, 0)][STOP] == pytest.approx(-0.5)
    assert q.q[(2, 0)][STOP] == pytest.approx(1 / 3 - 1)
    assert not q.warming_up


def test_freeze_after_warm_up_keeps_the_warm_up_table():
    q = QController(max_calls=5, conf_edges=(0.5,), target_cost=1.0, alpha=1.0, epsilon=0.0, warmup_steps=1,
                    freeze_after_warmup=True)
    for _ in range(2):  # the first verification learns (warm-up), the second only earns its reward
        q.begin()
        for calls in (1, 2):
            q.decide(calls, 0.9, calls)
        learned = {s: list(v) for s, v in q.q.items()}
        assert q.learn([0, 0, 0], calls=3) == pytest.approx(0 / 4 - 1)
    assert q.q == learned and q.q[(1, 0)][STOP] == pytest.approx(-1.0) and q.steps == 2 and q.episode == []


def test_exploration_only_during_warm_up_and_seeded():
    def actions(seed):
        q = QController(epsilon=1.0, warmup_steps=1, seed=seed)
        q.begin()
        return [q.decide(1, 0.5, 1) for _ in range(20)]

    assert actions(3) == actions(3) and STOP in [int(a) for a in actions(3)]
    q = QController(epsilon=1.0, warmup_steps=0)
    q.begin()
    assert all(q.decide(1, 0.5, 1) for _ in range(20))  # greedy: Q_init favours continue


def test_controller_state_round_trip():
    q = QController(epsilon=0.5, warmup_steps=10, seed=1)
    q.begin()
    q.decide(1, 0.5, 1)
    q.learn([0, 1], calls=1)
    r = QController(epsilon=0.5, warmup_steps=10, seed=99)
    r.load_state_dict(q.state_dict())
    q.begin(), r.begin()
    assert [q.decide(2, 0.4, 2) for _ in range(10)] == [r.decide(2, 0.4, 2) for _ in range(10)]
    assert r.q.keys() == q.q.keys() and r.steps == q.steps


def test_bad_controller_settings_are_refused():
    with pytest.raises(ValueError, match="decreasing"):
        QController(conf_edges=(0.1, 0.5))
    with pytest.raises(ValueError, match="alpha"):
        QController(alpha=0.0)
