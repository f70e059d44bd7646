-- 0015: the console's own keys (issue 44). Forward-only.
--
-- Random keys every process on the log shares, by name; the first process that needs one writes it
-- (INSERT … ON CONFLICT DO NOTHING) and every other reads that one. `oidc-pending` (32 random bytes,
-- base64url) seals the cookie of a sign-in pending at the identity provider
-- (src/domain/oidc.ts): it was derived from OIDC_CLIENT_SECRET, which a short secret let anyone
-- search for offline from a cookie /console/oidc/start hands out. Losing the row only voids the
-- sign-ins pending at that moment (a new key is written).
CREATE TABLE console_keys (
  name       TEXT PRIMARY KEY,
  secret     TEXT NOT NULL,
  created_at TEXT NOT NULL
) WITHOUT ROWID;
