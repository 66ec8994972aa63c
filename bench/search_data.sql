-- The enquiry search's measurement data (docs/benchmarks.md, "The enquiry search at 1,000,000
-- enquiries"): :enquiries rows (psql -v enquiries=1000000; bench/search.py substitutes it), run
-- on a scratch database migrated by manage.py migrate. It empties intake_enquiry first: never on
-- a database whose enquiries matter.
--
-- Names from 20 first names and 30 surnames, a unique e-mail each, a three-word subject, and a
-- 25-64 word message from 50 words: one of 997 made once (so that a row costs no subquery),
-- then the row's own house number and two words of its own. A common word is in up to three
-- quarters of them.
TRUNCATE intake_enquiry CASCADE;
CREATE TEMP TABLE search_bench_messages AS
WITH w AS (
  SELECT ARRAY['bin','collected','missed','green','garden','waste','parking','permit','visitor','pothole','road','street','lamp','broken','noise','neighbour','council','tax','payment','refund','school','place','library','card','housing','repair','damp','mould','boiler','heating','tree','fallen','graffiti','fly','tipping','recycling','bulky','collection','appointment','complaint','thanks','please','urgent','again','week','tuesday','friday','lane','avenue','close'] AS words
)
SELECT m, (SELECT string_agg(w.words[1 + ((m * k * 31 + k * 7) % 50)], ' ') FROM generate_series(1, 25 + m % 40) k) AS body
FROM generate_series(0, 996) m, w;
WITH w AS (
  SELECT ARRAY['bin','collected','missed','green','garden','waste','parking','permit','visitor','pothole','road','street','lamp','broken','noise','neighbour','council','tax','payment','refund','school','place','library','card','housing','repair','damp','mould','boiler','heating','tree','fallen','graffiti','fly','tipping','recycling','bulky','collection','appointment','complaint','thanks','please','urgent','again','week','tuesday','friday','lane','avenue','close'] AS words,
         ARRAY['Smith','Jones','Taylor','Brown','Williams','Wilson','Johnson','Davies','Robinson','Wright','Thompson','Evans','Walker','White','Roberts','Green','Hall','Wood','Jackson','Clarke','Kowalska','Nowak','Okafor','Singh','Patel','Khan','Murphy','Kelly','Garcia','Rossi'] AS surnames,
         ARRAY['Anna','Ben','Chloe','David','Emma','Farah','George','Hana','Ivan','Julia','Kofi','Lena','Mohammed','Nina','Oliver','Priya','Quinn','Rosa','Sam','Tom'] AS firsts
)
INSERT INTO intake_enquiry (id, reference, source, workflow_version, name, email, phone, subject, message,
  service_hint, consent, documents, state, current_revision, created_at, state_changed_at, updated_at, receipt_pending,
  receipt_failures, receipt_error)
SELECT gen_random_uuid(),
       'ENQ-' || upper(substr(md5(i::text), 1, 3) || lpad(to_hex(i), 5, '0')),
       'website', '1',
       w.firsts[1 + (i*7) % 20] || ' ' || w.surnames[1 + (i*13) % 30],
       lower(w.firsts[1 + (i*7) % 20]) || '.' || lower(w.surnames[1 + (i*13) % 30]) || i || '@example.org',
       '',
       initcap(w.words[1 + (i*3) % 50]) || ' ' || w.words[1 + (i*11) % 50] || ' ' || w.words[1 + (i*17) % 50],
       m.body || ' house ' || (i % 300) || ' ' || w.words[1 + (i*19) % 50] || ' ' || w.words[1 + (i*23) % 50] || ' lane.',
       '', true, '[]'::jsonb,
       (ARRAY['confirmed','ready_for_review','needs_information','rejected','approved'])[1 + i % 5],
       1, now() - (i || ' minutes')::interval, now() - (i || ' minutes')::interval, now(), false, 0, ''
FROM generate_series(1, :enquiries) i
CROSS JOIN w
JOIN search_bench_messages m ON m.m = i % 997;
DROP TABLE search_bench_messages;
ANALYZE intake_enquiry;
SELECT count(*), pg_size_pretty(pg_relation_size('intake_enquiry')) AS heap FROM intake_enquiry;
