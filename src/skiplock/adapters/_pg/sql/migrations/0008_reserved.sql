-- 0008: a placeholder. Version 8 belongs to the audit-trail migration developed on
-- another branch; this file only keeps the versions without a gap until that one lands,
-- and is deleted then (two files numbered 0008 refuse to load: skiplock checks that the
-- versions run 1..n). Nothing in 0009 depends on what 0008 does.
SELECT 1;
