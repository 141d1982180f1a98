--
-- A small shop's schema and data, standing in for your own pg_dump file (plain SQL, as
-- `pg_dump --no-owner --no-privileges` writes it; a custom-format dump, pg_dump -Fc, works
-- the same). Used by examples/postgres-your-dump.toml.
--

SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;

CREATE TABLE public.customers (
    id integer PRIMARY KEY,
    name text NOT NULL,
    city text NOT NULL
);

CREATE TABLE public.products (
    id integer PRIMARY KEY,
    title text NOT NULL,
    price numeric(10,2) NOT NULL
);

CREATE TABLE public.orders (
    id integer PRIMARY KEY,
    customer integer NOT NULL REFERENCES public.customers (id),
    product integer NOT NULL REFERENCES public.products (id),
    quantity integer NOT NULL,
    placed date NOT NULL
);

INSERT INTO public.customers
SELECT g, 'customer ' || g, (ARRAY['Brno', 'Lyon', 'Porto', 'Turku'])[1 + g % 4]
FROM generate_series(1, 2000) AS g;

INSERT INTO public.products
SELECT g, 'product ' || g, round((5 + (g * 37) % 500)::numeric / 3, 2)
FROM generate_series(1, 500) AS g;

INSERT INTO public.orders
SELECT g, 1 + (g * 7919) % 2000, 1 + (g * 104729) % 500, 1 + g % 5,
       date '2025-01-01' + (g % 365)
FROM generate_series(1, 20000) AS g;

CREATE INDEX orders_customer ON public.orders (customer);
