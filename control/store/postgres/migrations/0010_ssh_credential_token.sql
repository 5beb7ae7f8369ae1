-- The agent token that minted an SSH credential: a credential dies with
-- its token, as every stream and preview that rode on the token does.
-- Empty for credentials minted before this column existed.
ALTER TABLE ssh_credentials ADD COLUMN token_id text NOT NULL DEFAULT '';
