"""Tenants: quotas, usage, fair share, borrowing and queue depth (everyone signed in);
operators change quotas, through the log like every other change."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.core.types import SIZE_CLASS_LABELS, TENANT_LIMITS
from scheduler_app.models import Tenant
from scheduler_app.services.cluster import LIMIT_MAXIMUMS, MAX_GPUS_QUOTA, tenant_set_quota

from . import access
from .errors import named_or_404
from .fields import KnownFieldsOnly, StrictIntegerField
from .jobs import TransitionOut
from .reads import TenantFigures, tenant_figures


class LendingOut(serializers.Serializer):
    tenant = serializers.CharField(
        allow_null=True, help_text="The other tenant; null: capacity nobody is guaranteed.")
    gpus = serializers.IntegerField()


class TenantOut(serializers.Serializer):
    name = serializers.CharField(source="tenant.name")
    guaranteed_gpus = serializers.IntegerField(source="tenant.guaranteed_gpus")
    borrow_limit_gpus = serializers.IntegerField(source="tenant.borrow_limit_gpus")
    quota_limit_gpus = serializers.IntegerField(
        source="tenant.quota_limit_gpus", help_text="Guarantee plus borrow limit: the most "
        "GPUs the tenant may hold, and the largest job it may submit.")
    current_gpus = serializers.IntegerField(source="tenant.held_gpus",
                                            help_text="GPUs its jobs hold now.")
    max_gpus_per_user = serializers.IntegerField(
        source="tenant.max_gpus_per_user", allow_null=True,
        help_text="GPUs one owner may hold at once; a job past it waits (UserLimit). Null: "
        "no per-user cap.")
    default_runtime_s = serializers.IntegerField(
        source="tenant.default_runtime_s", allow_null=True,
        help_text="The time limit given at submit to a job that declares none. Null: none.")
    max_runtime_s = serializers.IntegerField(
        source="tenant.max_runtime_s", allow_null=True,
        help_text="The longest time limit a job may ask for; more is refused at submit. "
        "Null: any (up to 366 days).")
    usage_gpu_s = serializers.FloatField(help_text="Decayed GPU-seconds, as of now.")
    usage_gpu_h = serializers.SerializerMethodField()
    share = serializers.FloatField(
        allow_null=True, help_text="Fair share now: decayed usage (GPU-seconds) / guarantee "
        "(lower goes first); null without a guarantee. It moves every second; the rank was "
        "made from ranked_share.")
    ranked_share = serializers.FloatField(
        source="tenant.share", allow_null=True,
        help_text="The share the last tick ranked the tenant by, as of share_at (a tick "
        "ranks once a share period, 60 s by default): share_rank follows this, not share, "
        "which may have crossed another team's since. Null before the first tick or "
        "without a guarantee.")
    share_rank = serializers.IntegerField(
        source="tenant.share_rank", allow_null=True,
        help_text="Place in the last tick's fair-share order, by ranked_share (1 = served "
        "first; equal shares share a rank); null before the first tick.")
    share_at = serializers.DateTimeField(source="tenant.share_at", allow_null=True,
                                         help_text="When the last tick ranked it.")
    borrowed_gpus = serializers.IntegerField(help_text="GPUs held past the guarantee.")
    borrowed_from = LendingOut(many=True)
    lent_gpus = serializers.IntegerField(help_text="Of its idle guarantee, GPUs others use.")
    lent_to = LendingOut(many=True)
    queued_jobs = serializers.SerializerMethodField()
    queued_by_size_class = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Queued jobs per size class: " + ", ".join(SIZE_CLASS_LABELS) + ".")
    your_role = serializers.SerializerMethodField()

    def get_usage_gpu_h(self, row: TenantFigures) -> float:
        return row.usage_gpu_s / 3600.0

    def get_queued_jobs(self, row: TenantFigures) -> int:
        return sum(row.queued_by_size_class.values())

    def get_your_role(self, row: TenantFigures) -> str | None:
        """researcher, lead, or null (not a member)."""
        user = self.context.get("user")
        if user is None:
            return None
        return access.roles(user).get(row.tenant.pk)


def _figures(request: Request) -> list[TenantFigures]:
    return tenant_figures(now=timezone.now())


class TenantList(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(
        operation_id="tenants_list",
        summary="Every tenant's quota, usage, fair share, borrowing and queue depth",
        responses={200: TenantOut(many=True)},
    )
    def get(self, request: Request) -> Response:
        rows = _figures(request)
        return Response(TenantOut(rows, many=True, context={"user": request.user}).data)


class TenantDetail(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="tenants_retrieve", summary="One tenant",
                   responses={200: TenantOut})
    def get(self, request: Request, name: str) -> Response:
        tenant = named_or_404(Tenant.objects, name, "tenant", "GET /api/v1/tenants/")
        row = next(r for r in _figures(request) if r.tenant.pk == tenant.pk)
        return Response(TenantOut(row, context={"user": request.user}).data)


def _limit_field(name: str) -> StrictIntegerField:
    """A team limit: 1 to its maximum, null to clear it; left out, it keeps its value."""
    return StrictIntegerField(min_value=1, max_value=LIMIT_MAXIMUMS[name], required=False,
                              allow_null=True)


class QuotaIn(KnownFieldsOnly):
    guaranteed_gpus = StrictIntegerField(min_value=0, max_value=MAX_GPUS_QUOTA)
    borrow_limit_gpus = StrictIntegerField(min_value=0, max_value=MAX_GPUS_QUOTA)
    max_gpus_per_user = _limit_field("max_gpus_per_user")
    default_runtime_s = _limit_field("default_runtime_s")
    max_runtime_s = _limit_field("max_runtime_s")


class QuotaPatchIn(QuotaIn):
    guaranteed_gpus = StrictIntegerField(min_value=0, max_value=MAX_GPUS_QUOTA,
                                               required=False)
    borrow_limit_gpus = StrictIntegerField(min_value=0, max_value=MAX_GPUS_QUOTA,
                                                 required=False)

    def validate(self, attrs: dict) -> dict:
        if not attrs:  # nothing to change: no row of the log that says nothing
            raise serializers.ValidationError(
                "Nothing to change: give at least one of "
                f"{', '.join(self.fields)}.", code="empty")
        return super().validate(attrs)


class QuotaOut(serializers.Serializer):
    tenant = TenantOut()
    transition = TransitionOut(help_text="The log row of the change.")


class TenantQuota(APIView):
    """Operators set a tenant's guarantee and borrow limit, and its team limits
    (``max_gpus_per_user``, ``default_runtime_s``, ``max_runtime_s``: null clears one, one
    left out keeps its value). The change is a row of the log (kind tenant, reason
    QuotaChanged) and the scheduler follows it at the next tick."""

    permission_classes = [access.IsOperator]

    @extend_schema(operation_id="tenants_quota_set", summary="Set a tenant's quota (operators)",
                   request=QuotaIn, responses={200: QuotaOut})
    def put(self, request: Request, name: str) -> Response:
        return self._set(request, name, QuotaIn(data=request.data))

    @extend_schema(operation_id="tenants_quota_update",
                   summary="Change part of a tenant's quota (operators)",
                   request=QuotaPatchIn, responses={200: QuotaOut})
    def patch(self, request: Request, name: str) -> Response:
        return self._set(request, name, QuotaPatchIn(data=request.data))

    def _set(self, request: Request, name: str, data: serializers.Serializer) -> Response:
        tenant = named_or_404(Tenant.objects, name, "tenant", "GET /api/v1/tenants/")
        data.is_valid(raise_exception=True)
        row = tenant_set_quota(
            tenant=tenant,
            guaranteed_gpus=data.validated_data.get("guaranteed_gpus", tenant.guaranteed_gpus),
            borrow_limit_gpus=data.validated_data.get("borrow_limit_gpus",
                                                      tenant.borrow_limit_gpus),
            limits={k: data.validated_data[k] for k in TENANT_LIMITS if k in data.validated_data},
            actor_name=request.user.get_username(),
        )
        figures = next(r for r in _figures(request) if r.tenant.pk == tenant.pk)
        return Response({
            "tenant": TenantOut(figures, context={"user": request.user}).data,
            "transition": TransitionOut(row).data,
        })
