"""API tokens in the admin: listed (never their keys), revocable."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import ApiToken
from .tokens import token_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "user", "node", "created_at", "last_used_at",
                    "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "name", "user__username", "node__name"]
    readonly_fields = ["prefix", "key_hash", "user", "node", "created_at", "last_used_at",
                       "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a key is shown once: issue tokens through the API or api_token

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token_revoke(token=token)
