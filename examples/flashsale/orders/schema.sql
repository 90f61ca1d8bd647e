-- The flash sale's database: a sale and its stock, and one row per order.
-- The stock can never go below zero and a user has at most one order per
-- sale: the last guards, behind Redis's.
CREATE TABLE IF NOT EXISTS sales (
    id         text PRIMARY KEY,
    stock      bigint NOT NULL CHECK (stock >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS orders (
    id         bigint PRIMARY KEY,
    sale       text NOT NULL REFERENCES sales (id),
    user_id    text NOT NULL,
    n          bigint NOT NULL CHECK (n > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (sale, user_id)
);
