"""The webhook's decisions in a child process (`decider.ProcessDecider`): the same
verdicts as in this process, kept current by the stores' events, policies sent across,
and a child that dies is replaced."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from admission.kube import kinds, store
from admission.webhook import decider, review
from tests.admission import builders as ab
from tests.admission import waits
from tests.admission.webhook.test_review import PATIENT, guarded, hooks, request
from tests.gang import builders as gb


async def _until(pred: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    await waits.until(pred, what, timeout, interval=0.02)


@pytest.fixture
async def in_process() -> AsyncIterator[Callable[..., tuple[review.Hooks, Any]]]:
    made: list[review.Hooks] = []

    def make(*objects: Any, **kw: Any) -> tuple[review.Hooks, dict[kinds.Kind, store.Store]]:
        stores = ab.stores(*objects)
        h = review.Hooks(stores, decider.ProcessDecider(stores, **kw), config=PATIENT)
        made.append(h)
        return h, stores

    yield make
    for h in made:
        h.close()


async def test_the_child_decides_as_this_process_does(in_process: Any) -> None:
    objects = guarded(gb.template("gpus", gpus=6, namespace=ab.NS),
                      gb.template("four", gpus=4, namespace=ab.NS), gb.shape("h100-rail"))
    child, _ = in_process(objects)
    here = hooks(objects)
    impossible = request(ab.job())
    fits = request(ab.job("small", templates=("four",)))
    for req in (impossible, fits):
        a, b = await child.review("validate-jobs", req), await here.review("validate-jobs", req)
        assert (a.allowed, a.warnings, a.audit) == (b.allowed, b.warnings, b.audit)
    assert any("largest group of usable devices has 5" in w
               for w in (await child.review("validate-jobs", impossible)).warnings)
    here.close()


async def test_the_child_follows_the_stores(in_process: Any) -> None:
    child, stores = in_process(guarded(gb.template("gpus", gpus=6, namespace=ab.NS)))
    response = await child.review("validate-jobs", request(ab.job()))
    assert any("can never be admitted" in w for w in response.warnings)
    # A NodeShape with 8 GPUs on one root: the gang could now fit on new nodes.
    stores[kinds.NODE_SHAPE].seed(gb.shape("one-root", gpus=8, roots=1))
    response = await child.review("validate-jobs", request(ab.job("again")))
    assert response.allowed and response.warnings == []
    assert response.audit == {review.AUDIT_KEY: "decided"}


async def test_a_policy_scope_crosses_to_the_child(in_process: Any) -> None:
    policy = ab.fit_policy("team-a", subjects={"namespaces": [ab.NS]},
                           nodes={"matchLabels": {"pool": "none"}},
                           nodeShapes={"names": ["h100-rail"]}, enforcement="deny")
    child, _ = in_process(guarded(gb.template("gpus", gpus=6, namespace=ab.NS),
                                  gb.shape("one-root", gpus=8, roots=1),
                                  gb.shape("h100-rail"), policy))
    response = await child.review("validate-jobs", request(ab.job()))
    assert not response.allowed and response.status is not None
    assert "its FitPolicy forbids every node and shape" in response.status.message


async def test_a_child_that_dies_is_replaced(in_process: Any) -> None:
    child, _ = in_process(guarded(gb.template("gpus", gpus=6, namespace=ab.NS)),
                          restart_backoff=0)
    deciding = child.decider
    assert isinstance(deciding, decider.ProcessDecider)
    assert (await child.review("validate-jobs", request(ab.job()))).warnings
    deciding._proc.kill()
    await _until(lambda: deciding._conn is None, "the parent to see the child exit")
    # The next question starts a new child with the stores' cluster.
    response = await child.review("validate-jobs", request(ab.job(parallelism=3)))
    assert any("can never be admitted" in w for w in response.warnings)
    assert deciding.starts == 2


async def test_while_the_child_is_replaced_reviews_are_allowed_unchecked(
        in_process: Any) -> None:
    child, _ = in_process(guarded(gb.template("gpus", gpus=6, namespace=ab.NS)),
                          restart_backoff=3600)
    deciding = child.decider
    assert isinstance(deciding, decider.ProcessDecider)
    deciding._proc.kill()
    await _until(lambda: deciding._conn is None, "the parent to see the child exit")
    # Within the restart backoff no new child: allowed, no warning, the audit says why.
    response = await child.review("validate-jobs", request(ab.job()))
    assert response.allowed and response.warnings == []
    assert response.audit == {review.AUDIT_KEY: (
        "not checked: the decision process is restarting; the AdmissionCheck decides")}
    assert deciding.starts == 1
