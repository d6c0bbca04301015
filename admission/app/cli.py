"""The `fitgate` command line.

`fitgate fit` and `fitgate verify` answer offline what the admission check answers in the
cluster (`admission.app.offline`); `fitgate serve` runs the service
(`admission.app.serve`); `fitgate explain` says where a gang stands and what holds it back,
from the live objects (`admission.app.diagnose`); `fitgate shape capture` writes a
NodeShape from a live node and `fitgate shape check` lints shapes offline
(`admission.app.shapes`, `admission.app.shapecheck`).

Exit status: 0 for any verdict; 2 for bad input, with a message naming the file, the
object and the field. `fitgate explain` and `fitgate shape capture` also exit 1 when
the object is not found (or the API server answers with another error), 3 when no
kubeconfig or context is usable (missing or malformed file, unknown `--context`), 4 when
the API server does not answer (refused, or no answer within `--request-timeout`), 5
when the credentials may not read the Workload or job (or the node) itself; each with one
line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import pathlib
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import fitcore
from admission import config
from admission.app import offline
from admission.runtime import failpoint

EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 1
EXIT_KUBECONFIG = 3
EXIT_UNREACHABLE = 4
EXIT_FORBIDDEN = 5
#: `fitgate explain`'s default bound on each request, in seconds.
EXPLAIN_REQUEST_TIMEOUT = 10.0
#: Offline there is no API server to ask: the version is a flag with a stated default
#: (`fitgate serve` follows the API server's, `admission.app.kubeversion`).
KUBE_VERSION_HELP = ("the Kubernetes minor version whose default-feature scheduler and DRA "
                     "allocator to follow: %(choices)s (default %(default)s; set it to your "
                     "cluster's)")


# ------------------------------------------------------------------------ main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fitgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="fit a workload's gang against an offline inventory")
    fit.add_argument("--inventory", action="append", required=True, metavar="PATH",
                     help="Nodes, ResourceSlices, DeviceClasses, ResourceClaims, Pods "
                          "(file or directory; repeatable)")
    fit.add_argument("--shapes", action="append", default=[], metavar="PATH",
                     help="NodeShapes (file or directory; repeatable)")
    fit.add_argument("--workload", required=True, metavar="PATH",
                     help="one Workload or Job, with its ResourceClaimTemplates")
    fit.add_argument("-o", "--output", choices=("text", "json"), default="text")
    fit.add_argument("--lenient", action="store_true",
                     help="warn about unknown fields instead of refusing the object (the "
                          "API server's strict field validation refuses them)")
    fit.add_argument("--kube-version", default=fitcore.DEFAULT_KUBE_VERSION,
                     choices=fitcore.KUBE_VERSIONS, help=KUBE_VERSION_HELP)
    verify = sub.add_parser("verify", help="plan on an inventory, then check the nodes that "
                                           "came against what their shapes promised")
    verify.add_argument("--before", action="append", required=True, metavar="PATH",
                        help="the inventory when the plan was made (repeatable)")
    verify.add_argument("--after", action="append", required=True, metavar="PATH",
                        help="the inventory once the new nodes are up (repeatable)")
    verify.add_argument("--shapes", action="append", default=[], metavar="PATH",
                        help="NodeShapes (file or directory; repeatable)")
    verify.add_argument("--workload", required=True, metavar="PATH",
                        help="one Workload or Job, with its ResourceClaimTemplates")
    verify.add_argument("-o", "--output", choices=("text", "json"), default="text")
    verify.add_argument("--lenient", action="store_true",
                        help="warn about unknown fields instead of refusing the object")
    verify.add_argument("--kube-version", default=fitcore.DEFAULT_KUBE_VERSION,
                        choices=fitcore.KUBE_VERSIONS, help=KUBE_VERSION_HELP)
    serve = sub.add_parser("serve", help="run the admission check controller (in a cluster, "
                                          "or locally with a kubeconfig)")
    serve.add_argument("--config", metavar="FILE", help="YAML file of configuration fields")
    for field, info in config.Config.model_fields.items():
        serve.add_argument(config.flag(field), dest=f"cfg_{field}", metavar="VALUE",
                           help=f"{info.description or field.replace('_', ' ')} "
                                f"(env {config.env_var(field)})")
    explain = sub.add_parser(
        "explain", help="where a gang stands and what holds it back, from the live objects",
        description="TARGET: NAMESPACE/NAME, or [KIND/]NAME with -n (KIND: workload, job, "
                    "jobset, ...), as in `kubectl fitgate explain job/train -n team-a`")
    explain.add_argument("target", metavar="TARGET")
    explain.add_argument("-n", "--namespace",
                         help="namespace (default: the kubeconfig context's, else default)")
    explain.add_argument("-o", "--output", choices=("text", "json"), default="text")
    explain.add_argument("--kubeconfig", help="kubeconfig file (default: the files of "
                                              "$KUBECONFIG merged as kubectl merges them, "
                                              "else ~/.kube/config, else in-cluster)")
    explain.add_argument("--context", help="kubeconfig context (default: the current one)")
    explain.add_argument("--request-timeout", type=_seconds, metavar="SECONDS",
                         default=EXPLAIN_REQUEST_TIMEOUT,
                         help="bound on each request to the API server (default "
                              "%(default)s)")
    explain.add_argument("--no-fit", action="store_true",
                         help="do not read the inventory to plan the gang now")
    sub.add_parser("version", help="print the version")
    rel = sub.add_parser(
        "release", help="take fitgate out of the path of every Job and Pod it holds "
                        "(uninstall, break glass)",
        description="Removes fitgate's admission gate from every job and its scheduling "
                    "gate from every pod, and deletes the ProvisioningRequests and "
                    "PodTemplates fitgate created; idempotent. The chart's uninstall hook "
                    "runs it. See docs/platform-guide.md, 'Break glass'.")
    rel.add_argument("--all", action="store_true", required=True, dest="all_objects",
                     help="every namespace (required: there is no narrower scope yet)")
    rel.add_argument("--dry-run", action="store_true", help="only say what would change")
    rel.add_argument("-o", "--output", choices=("text", "json"), default="text")
    rel.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, "
                                          "~/.kube/config, or in-cluster)")
    rel.add_argument("--context", help="kubeconfig context")
    _shape_parser(sub)
    return parser


def _shape_parser(sub: Any) -> None:
    shape = sub.add_parser("shape", help="write NodeShapes from live nodes, lint them offline")
    verbs = shape.add_subparsers(dest="shape_command", required=True)
    cap = verbs.add_parser(
        "capture", help="print the NodeShape (YAML) of a live node's group",
        description="Reads the node, its ResourceSlices and the cluster's DeviceClasses "
                    "and claims; leaves out what belongs to the one node (see "
                    "docs/platform-guide.md, 'Writing NodeShapes'). Per-node device "
                    "attributes are reported on stderr.")
    cap.add_argument("node", metavar="NODE")
    cap.add_argument("--name", help="the NodeShape's name (default: the node group's)")
    cap.add_argument("--keep-per-node-attributes", action="store_true",
                     help="keep device attributes unique per node (UUIDs, bus ids)")
    cap.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, "
                                          "~/.kube/config, or in-cluster)")
    cap.add_argument("--context", help="kubeconfig context")
    check = verbs.add_parser(
        "check", help="lint NodeShape files offline (exit 0 clean, 1 findings, 2 unreadable)")
    check.add_argument("files", nargs="+", metavar="FILE", help="file or directory")


def run_shape(args: argparse.Namespace, connect: Any = None) -> int:
    """`fitgate shape capture|check`; `connect(kubeconfig, context)` makes the client
    (tests pass a fake)."""
    from admission.app import shapecheck, shapes

    if args.shape_command == "check":
        try:
            findings = shapecheck.check_files(args.files)
        except shapecheck.Unreadable as exc:
            print(f"fitgate shape check: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        for finding in findings:
            print(finding)
        return 1 if findings else 0
    from admission.kube import client as kube_client
    from admission.kube import errors as kube_errors
    from admission.kube import rbac

    async def run() -> shapes.Capture:
        api = await (connect or functools.partial(
            kube_client.ApiClient.connect, permissions=rbac.SHAPE_CAPTURE))(
                args.kubeconfig, args.context)
        try:
            return await shapes.capture(api, args.node, name=args.name,
                                        keep_per_node=args.keep_per_node_attributes)
        finally:
            close = getattr(api, "close", None)
            if close is not None:
                await close()

    try:
        got = asyncio.run(run())
    except kube_errors.NotFound:
        print(f"fitgate shape capture: node {args.node!r} not found", file=sys.stderr)
        return 1
    except kube_errors.ApiError as exc:
        what = "cannot reach the API server" if exc.status == 0 else "the API server refused"
        print(f"fitgate shape capture: {what}: {exc}", file=sys.stderr)
        return (EXIT_UNREACHABLE if exc.status == 0
                else EXIT_FORBIDDEN if exc.status in (401, 403) else EXIT_NOT_FOUND)
    except kube_errors.ConfigError as exc:
        print(f"fitgate shape capture: {exc}", file=sys.stderr)
        return EXIT_KUBECONFIG
    for warning in got.warnings():
        print(f"fitgate shape capture: warning: {warning}", file=sys.stderr)
    print(got.to_yaml(), end="")
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: between 0 and 3600 seconds")
    return value


def run_release(args: argparse.Namespace, connect: Any = None) -> int:
    """`fitgate release --all`; `connect(kubeconfig, context)` makes the client (tests pass
    a fake)."""
    from admission.app import release_all
    from admission.kube import client as kube_client
    from admission.kube import errors as kube_errors
    from admission.kube import rbac

    async def run() -> release_all.Report:
        if connect is None:
            api = await kube_client.ApiClient.connect(args.kubeconfig, args.context,
                                                      permissions=rbac.RELEASE_ALL)
        else:
            api = await connect(args.kubeconfig, args.context)
        try:
            return await release_all.release_all(api, dry_run=args.dry_run)
        finally:
            close = getattr(api, "close", None)
            if close is not None:
                await close()

    try:
        report = asyncio.run(run())
    except kube_errors.ApiError as exc:
        print(f"fitgate release: the API server refused: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_json(), indent=2) if args.output == "json"
          else report.to_text(dry_run=args.dry_run))
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from admission.app import serve

    try:
        cfg = config.load(args.config, flags={f: getattr(args, f"cfg_{f}")
                                              for f in config.FIELDS})
    except config.ConfigError as exc:
        print(f"fitgate serve: bad configuration:\n{exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        failpoint.check_environment()
    except failpoint.UnknownStep as exc:
        print(f"fitgate serve: bad test hook: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from admission.app import kubeversion
    from admission.kube import errors as kube_errors

    try:
        return asyncio.run(serve.serve(cfg))
    except (kube_errors.ConfigError, kubeversion.UnsupportedVersion) as exc:
        print(f"fitgate serve: {exc}", file=sys.stderr)
        return 1


def context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace of the kubeconfig context (the current one unless named), as kubectl
    takes it when -n is not given (in a pod without a kubeconfig: the pod's namespace);
    None when there is none or no readable kubeconfig."""
    from admission.kube import errors as kube_errors
    from admission.kube import kubeconfig as kubeconfig_

    try:
        return kubeconfig_.load(kubeconfig, context).namespace
    except kube_errors.ConfigError:
        pass
    if kubeconfig is None and not os.environ.get("KUBECONFIG"):
        with contextlib.suppress(OSError, ValueError):
            return pathlib.Path(_POD_NAMESPACE).read_text().strip() or None
    return None


_POD_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def explain_target(target: str, namespace: str | None, default_namespace: str | None = None
                   ) -> tuple[str, str, str | None]:
    """(namespace, name, kind or None) of `fitgate explain`'s TARGET: NAMESPACE/NAME, or
    [KIND/]NAME in `namespace` (-n), else in `default_namespace` (the kubeconfig
    context's), else in "default"."""
    from admission.app import diagnose

    fallback = namespace or default_namespace or "default"
    parts = target.split("/")
    if len(parts) == 1 and parts[0]:
        return fallback, parts[0], None
    if len(parts) == 2 and all(parts):
        head, name = parts
        is_kind = diagnose.job_kind(head) is not None or head.lower() in (
            "workload", "workloads", "wl")
        if namespace or is_kind:
            return fallback, name, head
        return head, name, None
    raise offline.UsageError(f"{target!r}: expected NAMESPACE/NAME or [KIND/]NAME with -n")


def run_explain(args: argparse.Namespace, connect: Any = None) -> int:
    """`fitgate explain`; `connect(kubeconfig, context)` makes the client (tests pass a
    fake). Exit codes: the module docstring."""
    from admission.app import diagnose
    from admission.kube import client as kube_client
    from admission.kube import errors as kube_errors

    try:
        namespace, name, kind = explain_target(
            args.target, args.namespace, context_namespace(args.kubeconfig, args.context))
    except offline.UsageError as exc:
        print(f"fitgate explain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    timeout = getattr(args, "request_timeout", EXPLAIN_REQUEST_TIMEOUT)
    server: list[str] = []

    async def run() -> diagnose.Report:
        if connect is None:
            api = await kube_client.ApiClient.connect(args.kubeconfig, args.context,
                                                      request_timeout=timeout,
                                                      in_cluster_first=False)
        else:
            api = await connect(args.kubeconfig, args.context)
        server.append(str(getattr(api, "host", "") or ""))
        try:
            return await diagnose.explain(api, namespace, name, kind, fit=not args.no_fit)
        finally:
            close = getattr(api, "close", None)
            if close is not None:
                await close()

    try:
        report = asyncio.run(run())
    except diagnose.NotFound as exc:
        print(f"fitgate explain: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except kube_errors.ConfigError as exc:
        print(f"fitgate explain: {exc}", file=sys.stderr)
        return EXIT_KUBECONFIG
    except kube_errors.ApiError as exc:
        return _explain_api_error(exc, server[0] if server else "", timeout)
    print(json.dumps(report.to_json(), indent=2) if args.output == "json"
          else report.to_text())
    return 0


def _explain_api_error(exc: Any, server: str, timeout: float) -> int:
    """One line on stderr for an API error that ends `fitgate explain`; the exit code."""
    at = f" at {server}" if server else ""
    if exc.status == 0:
        why = exc.message.split(": ", 1)[-1][:300]
        print(f"fitgate explain: the API server{at} does not answer (within {timeout:g} s): "
              f"{why}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if exc.status in (401, 403):
        print(f"fitgate explain: the API server{at} refused to show it ({exc.status} "
              f"{exc.reason}): {exc.message[:300]}", file=sys.stderr)
        return EXIT_FORBIDDEN
    print(f"fitgate explain: the API server refused: {str(exc)[:400]}", file=sys.stderr)
    return EXIT_NOT_FOUND


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return run_serve(args)
    if args.command == "explain":
        return run_explain(args)
    if args.command == "release":
        return run_release(args)
    if args.command == "shape":
        return run_shape(args)
    if args.command == "version":
        try:
            version = metadata.version("fitgate")
        except metadata.PackageNotFoundError:
            version = "unknown"
        print(f"fitgate {version}")
        print(f"Kubernetes versions followed: {', '.join(fitcore.KUBE_VERSIONS)}")
        print("  fitgate serve: the API server's (read at start; config kube_version "
              "overrides)")
        print(f"  fitgate fit, verify: --kube-version, default {fitcore.DEFAULT_KUBE_VERSION}")
        return 0
    try:
        if args.command == "verify":
            g, planned, verified = offline.run_verify(args.before, args.after, args.shapes,
                                              args.workload, lenient=args.lenient,
                                              kube_version=args.kube_version)
            text = (json.dumps(offline.verify_json(planned, verified), indent=2)
                    if args.output == "json" else offline.verify_text(g, planned, verified))
        else:
            notes: list[str] = []
            g, result = offline.run_fit(args.inventory, args.shapes, args.workload,
                                lenient=args.lenient, kube_version=args.kube_version,
                                notes=notes)
            for note in notes:
                print(f"fitgate: note: {note}", file=sys.stderr)
            text = (json.dumps(offline.as_json(g, result), indent=2) if args.output == "json"
                    else offline.as_text(g, result))
    except (offline.UsageError, fitcore.InputError) as exc:
        print(f"fitgate: bad input:\n{exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `fitgate fit ... | head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
