"""Who am I, and my API tokens (for pipelines: issue one signed in, use it as a Bearer)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.models import Membership

from . import access
from .errors import id_or_404
from .fields import KnownFieldsOnly, StrictCharField
from .models import ApiToken
from .tokens import token_issue, token_revoke


class MembershipOut(serializers.Serializer):
    tenant = serializers.CharField(source="tenant.name")
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MeOut(serializers.Serializer):
    username = serializers.CharField()
    operator = serializers.BooleanField()
    memberships = MembershipOut(many=True)


class Me(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="me", summary="Who you are: operator or not, your tenants "
                   "and roles", responses={200: MeOut})
    def get(self, request: Request) -> Response:
        memberships = Membership.objects.filter(user=request.user).select_related("tenant")
        return Response(MeOut({
            "username": request.user.get_username(),
            "operator": access.is_operator(request.user),
            "memberships": memberships,
        }).data)


class TokenOut(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]


class TokenCreatedOut(TokenOut):
    key = serializers.CharField(help_text="The token. Shown once: only its hash is kept.")

    class Meta(TokenOut.Meta):
        fields = [*TokenOut.Meta.fields, "key"]


class TokenIn(KnownFieldsOnly):
    name = StrictCharField(max_length=100, required=False, allow_blank=True, default="",
                                 help_text="What it is for, e.g. the pipeline's name.")


class TokenListCreate(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="tokens_list", summary="Your API tokens (never their keys)",
                   responses={200: TokenOut(many=True)})
    def get(self, request: Request) -> Response:
        return Response(TokenOut(ApiToken.objects.filter(user=request.user), many=True).data)

    @extend_schema(operation_id="tokens_create", summary="Issue yourself an API token",
                   request=TokenIn, responses={201: TokenCreatedOut})
    def post(self, request: Request) -> Response:
        data = TokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        token, key = token_issue(user=request.user, name=data.validated_data["name"])
        token.key = key
        return Response(TokenCreatedOut(token).data, status=status.HTTP_201_CREATED)


class TokenRevoke(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="tokens_revoke", summary="Revoke one of your tokens "
                   "(operators: anyone's, agents' too)", request=None,
                   responses={200: TokenOut})
    def delete(self, request: Request, pk: int) -> Response:
        token = id_or_404(ApiToken.objects, pk, "token", "GET /api/v1/tokens/")
        if token.user_id != request.user.pk and not access.is_operator(request.user):
            raise PermissionDenied("This token is not yours.")
        return Response(TokenOut(token_revoke(token=token)).data)
