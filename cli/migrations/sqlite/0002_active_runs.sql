-- The queue limits count the runs going on at each create: an index keeps that
-- from reading every run.
CREATE INDEX runs_by_status ON runs (status, tenant);
