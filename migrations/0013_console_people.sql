-- 0013: operators sign in with the lender's identity provider (OpenID Connect; contract §9,
-- issue 34). Forward-only.

-- The person a session was opened for (the ID token's `sub`, `name`, `email`); null for a session a
-- token opened. Never a token: the session needs no more than who and which role.
ALTER TABLE console_sessions ADD COLUMN subject TEXT;
ALTER TABLE console_sessions ADD COLUMN name TEXT;
ALTER TABLE console_sessions ADD COLUMN email TEXT;

-- Who did it: the person (e-mail, else subject) of the session or of the sign-in; null for a token.
ALTER TABLE console_audit ADD COLUMN person TEXT;
