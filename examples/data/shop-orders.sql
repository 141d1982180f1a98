-- Your own pgbench script (pgbench -n -f): one customer's orders with their products' prices.
\set customer random(1, 2000)
SELECT o.id, p.title, o.quantity * p.price AS total
  FROM orders o JOIN products p ON p.id = o.product
 WHERE o.customer = :customer
 ORDER BY o.placed DESC;
