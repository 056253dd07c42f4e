"""Child process of the store crash test: writes turns, next states and samples until it is killed.

Prints ``turn <id>`` after each committed turn and ``sample <id>`` after each committed judgement, so
the parent knows what was durably committed before it sends SIGKILL.
"""

import sys

from openclaw_trl.records import Judgement, TrainingSample, Vote
from openclaw_trl.store import Store
from tests.helpers import served_turn


def main(path: str) -> None:
    store = Store(path)
    session = store.conversations.open_session("crash")
    previous = None
    i = 0
    while True:
        turn_id = store.conversations.add_turn(
            served_turn(
                session,
                f"message {i}",
                prompt_ids=[1, 2, 3],
                completion_ids=[4, 5],
                sampling_logprobs=[-0.5, -0.25],
                completion_text="hi",
            )
        )
        print(f"turn {turn_id}", flush=True)
        if previous is not None:
            store.conversations.attach_next_state(
                previous, {"role": "user", "content": f"message {i}"}, "request"
            )
            turn = store.conversations.get_turn(previous)
            sample = TrainingSample(previous, [1, 2, 3], [4, 5], [-0.5, -0.25], 1.0, 0, reward=1.0)
            votes = [Vote("prm", "test", "\\boxed{1}", 1)]
            sample_id = store.judging.save_judgement(Judgement(turn, votes, 1, sample=sample))
            print(f"sample {sample_id}", flush=True)
        previous = turn_id
        i += 1


if __name__ == "__main__":
    main(sys.argv[1])
