"""AdmissionReview (admission.k8s.io/v1) as pydantic models: what the API server sends and
what fitgate answers. Unknown fields are kept out of the way (ignored), fields fitgate
reads are typed, and the object under review stays a plain dict (the engine's readers take
plain dicts and report their own field errors)."""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

import pydantic

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", populate_by_name=True,
                                       frozen=True)


class GroupVersionKind(_Model):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_Model):
    group: str = ""
    version: str
    resource: str


class UserInfo(_Model):
    username: str = ""
    uid: str = ""
    groups: list[str] = []


class AdmissionRequest(_Model):
    uid: str = pydantic.Field(min_length=1, max_length=256)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str = pydantic.Field("", alias="subResource")
    name: str = ""
    namespace: str = ""
    operation: Operation
    user_info: UserInfo = pydantic.Field(default_factory=UserInfo, alias="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = pydantic.Field(None, alias="oldObject")
    dry_run: bool = pydantic.Field(False, alias="dryRun")


class AdmissionReview(_Model):
    api_version: Literal["admission.k8s.io/v1"] = pydantic.Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class Status(_Model):
    code: int
    message: str
    reason: str = ""


class AdmissionResponse(_Model):
    """The answer to one request. `patch` holds JSONPatch operations (sent base64);
    `audit` goes out as `auditAnnotations` (the API server records them in its audit log
    under `<webhook name>/<key>`; the user never sees them)."""

    uid: str
    allowed: bool
    status: Status | None = None
    patch: list[dict[str, Any]] = []
    warnings: list[str] = []
    audit: dict[str, str] = {}

    def review(self) -> dict[str, Any]:
        """The AdmissionReview JSON the API server expects back."""
        response: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if self.status is not None:
            response["status"] = self.status.model_dump(exclude_defaults=True)
        if self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(
                json.dumps(self.patch, separators=(",", ":")).encode()).decode()
        if self.warnings:
            response["warnings"] = list(self.warnings)
        if self.audit:
            response["auditAnnotations"] = dict(self.audit)
        return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def allow(request: AdmissionRequest, *, warnings: list[str] | None = None,
          patch: list[dict[str, Any]] | None = None,
          audit: dict[str, str] | None = None) -> AdmissionResponse:
    return AdmissionResponse(uid=request.uid, allowed=True, patch=patch or [],
                             warnings=warnings or [], audit=audit or {})


def deny(request: AdmissionRequest, message: str, *, code: int = 403,
         reason: str = "Forbidden", warnings: list[str] | None = None,
         audit: dict[str, str] | None = None) -> AdmissionResponse:
    return AdmissionResponse(uid=request.uid, allowed=False,
                             status=Status(code=code, message=message, reason=reason),
                             warnings=warnings or [], audit=audit or {})
