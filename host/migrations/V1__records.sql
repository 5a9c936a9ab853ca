-- Every record of the platform, under its key (`order/{store}/{id}`, `work/{kind}/{due}/…`), as
-- JSON. Keys sort byte-wise (COLLATE "C"), the order the service's scans rely on on every backend.
CREATE TABLE records (
    key text COLLATE "C" PRIMARY KEY,
    value jsonb NOT NULL
);
