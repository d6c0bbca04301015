"""What `fitgate serve` runs: the list of component factories.

A factory is `def component(ctx: context.Context) -> context.Component` (see
`admission.context`): it builds its controllers and servers from the context. The
component types live in `admission.context`, below the stages, so this module imports the
stages at the top and only `admission.app.serve` imports it.

The lead adds each branch's factory here at merge (ctl-logic: the Workload reconciler;
webhook: the webhook server and the gate controller).
"""

from __future__ import annotations

from admission import context
from admission.certs import keeper as certs
from admission.check import admissioncheck, workload
from admission.webhook import component as webhook


def factories() -> list[context.Factory]:
    # certs before webhook: servers start in this order, and the webhook server needs the
    # certificate files the self-managed certificate keeper writes.
    return [admissioncheck.component, workload.component, certs.component, webhook.component]
