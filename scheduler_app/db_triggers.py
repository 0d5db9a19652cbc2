"""SQL that makes the Transition table append-only, per database vendor.

The migration installs it; the SQLite backend's ``flush`` drops and re-creates it around
its DELETEs (PostgreSQL's flush uses TRUNCATE, which row triggers do not see). Both
vendors report the refusal as an integrity error whose message says "append-only".
"""

from __future__ import annotations

TRANSITION_TABLE = "scheduler_app_transition"

POSTGRES_INSTALL = [
    f"""
    CREATE OR REPLACE FUNCTION scheduler_transition_append_only() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION 'transition log is append-only: % refused on {TRANSITION_TABLE}', TG_OP
            USING ERRCODE = 'restrict_violation';
    END;
    $$ LANGUAGE plpgsql;
    """,
    f"""
    CREATE TRIGGER transition_append_only
    BEFORE UPDATE OR DELETE ON {TRANSITION_TABLE}
    FOR EACH ROW EXECUTE FUNCTION scheduler_transition_append_only();
    """,
]
POSTGRES_REMOVE = [
    f"DROP TRIGGER IF EXISTS transition_append_only ON {TRANSITION_TABLE};",
    "DROP FUNCTION IF EXISTS scheduler_transition_append_only();",
]

SQLITE_INSTALL = [
    f"""
    CREATE TRIGGER transition_no_update BEFORE UPDATE ON {TRANSITION_TABLE}
    BEGIN SELECT RAISE(ABORT, 'transition log is append-only: UPDATE refused'); END;
    """,
    f"""
    CREATE TRIGGER transition_no_delete BEFORE DELETE ON {TRANSITION_TABLE}
    BEGIN SELECT RAISE(ABORT, 'transition log is append-only: DELETE refused'); END;
    """,
]
SQLITE_REMOVE = [
    "DROP TRIGGER IF EXISTS transition_no_update;",
    "DROP TRIGGER IF EXISTS transition_no_delete;",
]


def install_sql(vendor: str) -> list[str]:
    return {"postgresql": POSTGRES_INSTALL, "sqlite": SQLITE_INSTALL}.get(vendor, [])


def remove_sql(vendor: str) -> list[str]:
    return {"postgresql": POSTGRES_REMOVE, "sqlite": SQLITE_REMOVE}.get(vendor, [])
