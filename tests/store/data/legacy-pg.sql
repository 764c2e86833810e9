--
-- PostgreSQL database dump
--

\restrict wrBLRByOlsEIcvZvtrlUHM0GqbWsIt1qTbk9PAHRdky9KugKXrRPnh4QAICmA9u

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: legacy; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA legacy;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: conversations; Type: TABLE; Schema: legacy; Owner: -
--

CREATE TABLE legacy.conversations (
    id text NOT NULL COLLATE pg_catalog."C",
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    principal text NOT NULL,
    budget text NOT NULL
);


--
-- Name: events; Type: TABLE; Schema: legacy; Owner: -
--

CREATE TABLE legacy.events (
    run_id text NOT NULL COLLATE pg_catalog."C",
    seq integer NOT NULL,
    at double precision NOT NULL,
    kind text NOT NULL,
    step integer NOT NULL,
    data text NOT NULL,
    prev_hash text NOT NULL,
    hash text NOT NULL
);


--
-- Name: ledger; Type: TABLE; Schema: legacy; Owner: -
--

CREATE TABLE legacy.ledger (
    run_id text NOT NULL COLLATE pg_catalog."C",
    call_id text NOT NULL,
    tool text NOT NULL,
    fingerprint text NOT NULL,
    intent_at double precision NOT NULL,
    outcome text,
    outcome_at double precision
);


--
-- Name: messages; Type: TABLE; Schema: legacy; Owner: -
--

CREATE TABLE legacy.messages (
    run_id text NOT NULL COLLATE pg_catalog."C",
    seq integer NOT NULL,
    body text NOT NULL,
    hash text NOT NULL
);


--
-- Name: runs; Type: TABLE; Schema: legacy; Owner: -
--

CREATE TABLE legacy.runs (
    id text NOT NULL COLLATE pg_catalog."C",
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    status text NOT NULL,
    principal text NOT NULL,
    setup text NOT NULL,
    config text NOT NULL,
    meta text NOT NULL,
    message_count integer DEFAULT 0 NOT NULL,
    message_hash text NOT NULL,
    event_count integer DEFAULT 0 NOT NULL,
    event_hash text NOT NULL,
    seal text,
    lease_owner text,
    lease_until double precision,
    conversation_id text COLLATE pg_catalog."C",
    turn integer,
    history integer DEFAULT 0 NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: legacy; Owner: -
--

CREATE TABLE legacy.schema_migrations (
    version integer NOT NULL,
    name text,
    applied_at double precision
);


--
-- Data for Name: conversations; Type: TABLE DATA; Schema: legacy; Owner: -
--

INSERT INTO legacy.conversations VALUES ('14b5d7775bc248e18a33570245ee0ec3', 1796145729.8658729, 1796145729.8658729, '{"id":"local","roles":[],"scopes":["*"]}', '{"max_input_tokens":null,"max_output_tokens":null,"max_total_tokens":null,"max_turns":null}');


--
-- Data for Name: events; Type: TABLE DATA; Schema: legacy; Owner: -
--

INSERT INTO legacy.events VALUES ('legacy-completed', 1, 1796145729.7876008, 'run_started', 0, '{"principal": "local", "prompt": "<13 chars>"}', '0000000000000000000000000000000000000000000000000000000000000000', '8be0b10430a6e0a6192e4c9fd19c17baf8a650f8a001c41b0277a759a344eddd');
INSERT INTO legacy.events VALUES ('legacy-completed', 2, 1796145729.7876346, 'step_started', 1, '{}', '8be0b10430a6e0a6192e4c9fd19c17baf8a650f8a001c41b0277a759a344eddd', '182aeab717563594cb464b0143f58be722f41b8f76b2c97a022ab4dbb0f8e883');
INSERT INTO legacy.events VALUES ('legacy-completed', 3, 1796145729.7953799, 'model_replied', 1, '{"finish_reason": "tool_calls", "content": null, "tool_calls": 2, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', '182aeab717563594cb464b0143f58be722f41b8f76b2c97a022ab4dbb0f8e883', '5ca36d0fb9c7b90fd66762b217ab54f0aea52630ac028cd887ed2da2d2fdcdae');
INSERT INTO legacy.events VALUES ('legacy-completed', 4, 1796145729.795541, 'call_validated', 1, '{"id": "c1", "tool": "lookup", "read_only": true, "fingerprint": "14445f94af9a48dacce3a33c544c9f633a26fb8c0ec009c84dd378946f443551", "arguments": {"key": "a"}}', '5ca36d0fb9c7b90fd66762b217ab54f0aea52630ac028cd887ed2da2d2fdcdae', '11df9e3113a9a16cb5aa1397b5ad5151f76b365a9a004e0e0e2aa6f8f42f1025');
INSERT INTO legacy.events VALUES ('legacy-completed', 5, 1796145729.795543, 'call_validated', 1, '{"id": "c2", "tool": "transfer", "read_only": false, "fingerprint": "64c9f9d8e5640429eb205a9f34ec905fda2c5863588feef99cc26d71cf7c252d", "arguments": {"amount": 5}}', '11df9e3113a9a16cb5aa1397b5ad5151f76b365a9a004e0e0e2aa6f8f42f1025', '8cce322caa94ba832d3b1bf53d3a25c25f964a3c131f7941d94b952bafe29d89');
INSERT INTO legacy.events VALUES ('legacy-completed', 6, 1796145729.8179452, 'call_executed', 1, '{"id": "c1", "tool": "lookup", "outcome": "ok", "result": "<36 chars>", "digest": "62db985b4dd8ad2ed10c9f92f379574b41aae06fff8e432d6b4553084cc74fe2"}', '8cce322caa94ba832d3b1bf53d3a25c25f964a3c131f7941d94b952bafe29d89', '910fb235b85ed82df94f9d808607144f0da697bc118b8de409c78bcefcaf8d12');
INSERT INTO legacy.events VALUES ('legacy-completed', 7, 1796145729.8206584, 'intent_recorded', 1, '{"id": "c2", "tool": "transfer", "fingerprint": "64c9f9d8e5640429eb205a9f34ec905fda2c5863588feef99cc26d71cf7c252d"}', '910fb235b85ed82df94f9d808607144f0da697bc118b8de409c78bcefcaf8d12', '3e82a60f7b275ea54998bbed091a9d01af442f95a2fa0e31b0cbd2d1b25355ae');
INSERT INTO legacy.events VALUES ('legacy-completed', 8, 1796145729.8457437, 'call_executed', 1, '{"id": "c2", "tool": "transfer", "outcome": "ok", "result": "<66 chars>", "digest": "172102363e8d1931bb86bb340dc3c422e534beaa1596f18a465ad7cab04e9b65"}', '3e82a60f7b275ea54998bbed091a9d01af442f95a2fa0e31b0cbd2d1b25355ae', '6842744a14e6fb104543bcb3059f0cc669b2d228c5dd639c10221d3aa7cadb51');
INSERT INTO legacy.events VALUES ('legacy-completed', 9, 1796145729.8468795, 'outcome_recorded', 1, '{"id": "c2", "tool": "transfer", "digest": "172102363e8d1931bb86bb340dc3c422e534beaa1596f18a465ad7cab04e9b65"}', '6842744a14e6fb104543bcb3059f0cc669b2d228c5dd639c10221d3aa7cadb51', '9f756d3276b312d810f7bc561b5dc88dd30cafc70b3beffb2dcd7a15ac6bcec9');
INSERT INTO legacy.events VALUES ('legacy-completed', 10, 1796145729.8477097, 'step_started', 2, '{}', '9f756d3276b312d810f7bc561b5dc88dd30cafc70b3beffb2dcd7a15ac6bcec9', '7fc9588e251e234b61342f4ba8ceac45cc9a4a28f9a09475826de4e7d6fb509d');
INSERT INTO legacy.events VALUES ('legacy-completed', 11, 1796145729.8486881, 'model_replied', 2, '{"finish_reason": "tool_calls", "content": null, "tool_calls": 1, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', '7fc9588e251e234b61342f4ba8ceac45cc9a4a28f9a09475826de4e7d6fb509d', '78f9b48f9c19ca26695f7c1d448192d097d5b2a303100c12648df6325f64d369');
INSERT INTO legacy.events VALUES ('legacy-completed', 12, 1796145729.848789, 'call_validated', 2, '{"id": "c3", "tool": "lookup", "read_only": true, "fingerprint": "c0be70f6a8c2a0fe02e00d2d206cf8acd09c116609a5dd938fe7e8277f444c1f", "arguments": {"key": "b"}}', '78f9b48f9c19ca26695f7c1d448192d097d5b2a303100c12648df6325f64d369', 'dab676cd38888df3146819a0b3830be56148584ce8ae723eee1867b31c9004ad');
INSERT INTO legacy.events VALUES ('legacy-completed', 13, 1796145729.849069, 'call_executed', 2, '{"id": "c3", "tool": "lookup", "outcome": "ok", "result": "<36 chars>", "digest": "d24fa48e8e4e07011631e80c7dc09c77397dfc836b22c68299f6e54ce0c86e35"}', 'dab676cd38888df3146819a0b3830be56148584ce8ae723eee1867b31c9004ad', '211bb98d6ea61b54a2ad3ef50e428836b08dc06d5a43725210c78952601438ad');
INSERT INTO legacy.events VALUES ('legacy-completed', 14, 1796145729.8490956, 'step_started', 3, '{}', '211bb98d6ea61b54a2ad3ef50e428836b08dc06d5a43725210c78952601438ad', 'd387de95fdf3f76cd7c06eae8ed1bf4c304ad1fd89571aa44c371877b9e5d1d9');
INSERT INTO legacy.events VALUES ('legacy-completed', 15, 1796145729.8502944, 'model_replied', 3, '{"finish_reason": "stop", "content": "<8 chars>", "tool_calls": 0, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', 'd387de95fdf3f76cd7c06eae8ed1bf4c304ad1fd89571aa44c371877b9e5d1d9', '8777db683ece3a2dcf0d33137d1fa896a6fb0e9b39a5ae953391964a14c7da06');
INSERT INTO legacy.events VALUES ('legacy-completed', 16, 1796145729.8503244, 'run_finished', 3, '{"status": "completed", "output": "<8 chars>", "reason": null}', '8777db683ece3a2dcf0d33137d1fa896a6fb0e9b39a5ae953391964a14c7da06', '6c24931212f4973b9a3372ff54d40be4afeff935ef2663f75739e815c4d12ae8');
INSERT INTO legacy.events VALUES ('legacy-paused', 1, 1796145729.854493, 'run_started', 0, '{"principal": "local", "prompt": "<10 chars>"}', '0000000000000000000000000000000000000000000000000000000000000000', '51c78d3894b7c135c294f1c66f709f8472c5019092c7b2fc9396754f2ff64ddb');
INSERT INTO legacy.events VALUES ('legacy-paused', 2, 1796145729.8545086, 'step_started', 1, '{}', '51c78d3894b7c135c294f1c66f709f8472c5019092c7b2fc9396754f2ff64ddb', 'b7ad3a7d69ea3fa281755edc446e9ce25c981bafb7b29b75f6b3f1172cec0a8d');
INSERT INTO legacy.events VALUES ('legacy-paused', 3, 1796145729.855448, 'model_replied', 1, '{"finish_reason": "tool_calls", "content": null, "tool_calls": 1, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', 'b7ad3a7d69ea3fa281755edc446e9ce25c981bafb7b29b75f6b3f1172cec0a8d', 'cc895a2a92ec532e3295d3b8959ff549de6d376718e2968d66198fb0b696c7fa');
INSERT INTO legacy.events VALUES ('legacy-paused', 4, 1796145729.8555243, 'call_validated', 1, '{"id": "r1", "tool": "lookup", "read_only": true, "fingerprint": "a318bee08397dcafb9b7c9a26cef11a4ccff22257e00c5de68c4b90399a4917a", "arguments": {"key": "t"}}', 'cc895a2a92ec532e3295d3b8959ff549de6d376718e2968d66198fb0b696c7fa', '934356d924f629e995878c9a8c17f826e9ae01f96d2d9acf849f6b5eeef384cb');
INSERT INTO legacy.events VALUES ('legacy-paused', 5, 1796145729.85576, 'call_executed', 1, '{"id": "r1", "tool": "lookup", "outcome": "ok", "result": "<36 chars>", "digest": "0375ff9291fae14b618b03ae83b56056a2022c33c9ce971ed18618e67e16c5fc"}', '934356d924f629e995878c9a8c17f826e9ae01f96d2d9acf849f6b5eeef384cb', '4321a21db777f14417e0ee84df04de2603e6364d3295e88304b9d2336d6fdc71');
INSERT INTO legacy.events VALUES ('legacy-paused', 6, 1796145729.8557844, 'step_started', 2, '{}', '4321a21db777f14417e0ee84df04de2603e6364d3295e88304b9d2336d6fdc71', '0241b857e415b7e81187c8fdf6cee90d86ca882ca3a103c61297579729371aed');
INSERT INTO legacy.events VALUES ('legacy-paused', 7, 1796145729.8567684, 'model_replied', 2, '{"finish_reason": "tool_calls", "content": null, "tool_calls": 1, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', '0241b857e415b7e81187c8fdf6cee90d86ca882ca3a103c61297579729371aed', 'b6a8632ca696b8ac15fc3d78ddd202550b01659370bf772faf8d4e777ab01459');
INSERT INTO legacy.events VALUES ('legacy-paused', 8, 1796145729.856837, 'approval_requested', 2, '{"id": "r2", "tool": "refund", "arguments": {"ticket": "T-9"}, "reason": "refund requires approval"}', 'b6a8632ca696b8ac15fc3d78ddd202550b01659370bf772faf8d4e777ab01459', 'c0a1f95bfcc5f011cf3fbecce78ae0e6f3013993c399a1ce518624613b886b65');
INSERT INTO legacy.events VALUES ('legacy-paused', 9, 1796145729.8568501, 'run_paused', 2, '{"status": "awaiting_approval", "reason": "waiting for approval"}', 'c0a1f95bfcc5f011cf3fbecce78ae0e6f3013993c399a1ce518624613b886b65', 'a62e7201ce6fd2fd5d2ef5b6e50ba29a592f5ab03537bf39ad96f6bab0ed3821');
INSERT INTO legacy.events VALUES ('legacy-paused', 10, 1796145729.8629832, 'approval_decided', 2, '{"id": "r2", "tool": "refund", "approved": true, "reason": null, "by": "cli", "fingerprint": "03dfdf465c2b5708ca80adb1b7d83117af00b5376b0d2254ab5b5be8098ad1cc"}', 'a62e7201ce6fd2fd5d2ef5b6e50ba29a592f5ab03537bf39ad96f6bab0ed3821', '44c7d6945cc7fbfdf5dfa92bdec0b122ab2eb181fb92d5265c4a7c0361625af0');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 1, 1796145729.866611, 'run_started', 0, '{"principal": "local", "prompt": "<10 chars>"}', '0000000000000000000000000000000000000000000000000000000000000000', '904fa55e75e0ac1280303affc1bba3a2e0755bfb7de636410f0e4ad989d7ed33');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 2, 1796145729.8666267, 'step_started', 1, '{}', '904fa55e75e0ac1280303affc1bba3a2e0755bfb7de636410f0e4ad989d7ed33', 'd1dd87d149ccff769c265a6bcacd68609093aefe82295e2172c156e190fe2b7f');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 3, 1796145729.8677886, 'model_replied', 1, '{"finish_reason": "tool_calls", "content": null, "tool_calls": 1, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', 'd1dd87d149ccff769c265a6bcacd68609093aefe82295e2172c156e190fe2b7f', 'f32a47eb3ff0892102da84fbd2608b7edc3cf395df0e9928a5929f7d9ef9c0a5');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 4, 1796145729.86787, 'call_validated', 1, '{"id": "t1", "tool": "lookup", "read_only": true, "fingerprint": "f2dbecacc1248553e09c72dc43142d77d2a73926e588a0a15875cd0f906920b3", "arguments": {"key": "x"}}', 'f32a47eb3ff0892102da84fbd2608b7edc3cf395df0e9928a5929f7d9ef9c0a5', 'a7b213e213df91d129aa6370254e4857da99b9bc273cf941e95849d72c1b104c');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 5, 1796145729.8681386, 'call_executed', 1, '{"id": "t1", "tool": "lookup", "outcome": "ok", "result": "<36 chars>", "digest": "71b86bb2ca0a7b0abcd97794b540e49dcb7e870ff055512b3af08ad458d2c6dc"}', 'a7b213e213df91d129aa6370254e4857da99b9bc273cf941e95849d72c1b104c', 'e07772d9ef7c3822b91bae84805fbd1a78855fdd446d890ebfc6c860112e525f');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 6, 1796145729.868169, 'step_started', 2, '{}', 'e07772d9ef7c3822b91bae84805fbd1a78855fdd446d890ebfc6c860112e525f', '5fb9994d91f35838d8b4cd32ec1efddd7af815cd4c00d0b1765d26c8dc22dcff');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 7, 1796145729.8740895, 'model_replied', 2, '{"finish_reason": "stop", "content": "<10 chars>", "tool_calls": 0, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', '5fb9994d91f35838d8b4cd32ec1efddd7af815cd4c00d0b1765d26c8dc22dcff', '0b9812f98b47db5a864d07d9dc9a9510710e15149549fe883bca6be6154e0e99');
INSERT INTO legacy.events VALUES ('legacy-turn-1', 8, 1796145729.8741155, 'run_finished', 2, '{"status": "completed", "output": "<10 chars>", "reason": null}', '0b9812f98b47db5a864d07d9dc9a9510710e15149549fe883bca6be6154e0e99', '9a4186ff8c1ca9a0a3e69b98de021c19b8fb3e74d3895150f036dba34118e4df');
INSERT INTO legacy.events VALUES ('legacy-turn-2', 1, 1796145729.8750184, 'run_started', 0, '{"principal": "local", "prompt": "<10 chars>"}', '0000000000000000000000000000000000000000000000000000000000000000', 'b3e5b3c67589fb9e158cb913bf1229102d4c3ddf2b06a9657903f437e80ac8bb');
INSERT INTO legacy.events VALUES ('legacy-turn-2', 2, 1796145729.8750327, 'step_started', 1, '{}', 'b3e5b3c67589fb9e158cb913bf1229102d4c3ddf2b06a9657903f437e80ac8bb', '1aee2cd025f0c9771103674d6919c1d0df5b943964922ca54fed8e681513570c');
INSERT INTO legacy.events VALUES ('legacy-turn-2', 3, 1796145729.87587, 'model_replied', 1, '{"finish_reason": "stop", "content": "<11 chars>", "tool_calls": 0, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}', '1aee2cd025f0c9771103674d6919c1d0df5b943964922ca54fed8e681513570c', 'a1c6c1e61bdcafe58744424af0ab2a83bd1127177a568b96c7f3574c01287604');
INSERT INTO legacy.events VALUES ('legacy-turn-2', 4, 1796145729.8758888, 'run_finished', 1, '{"status": "completed", "output": "<11 chars>", "reason": null}', 'a1c6c1e61bdcafe58744424af0ab2a83bd1127177a568b96c7f3574c01287604', '03201e25df246175418f1a43bd9180d94907134904cc58536fb2a80c3dd9de6b');


--
-- Data for Name: ledger; Type: TABLE DATA; Schema: legacy; Owner: -
--

INSERT INTO legacy.ledger VALUES ('legacy-completed', 'c1', 'lookup', '14445f94af9a48dacce3a33c544c9f633a26fb8c0ec009c84dd378946f443551', 1796145729.8179452, '{"ok": true, "result": "value of a"}', 1796145729.8179452);
INSERT INTO legacy.ledger VALUES ('legacy-completed', 'c2', 'transfer', '64c9f9d8e5640429eb205a9f34ec905fda2c5863588feef99cc26d71cf7c252d', 1796145729.8206584, '{"ok": true, "result": {"moved": 5, "key": "legacy-completed:c2"}}', 1796145729.8468795);
INSERT INTO legacy.ledger VALUES ('legacy-completed', 'c3', 'lookup', 'c0be70f6a8c2a0fe02e00d2d206cf8acd09c116609a5dd938fe7e8277f444c1f', 1796145729.849069, '{"ok": true, "result": "value of b"}', 1796145729.849069);
INSERT INTO legacy.ledger VALUES ('legacy-paused', 'r1', 'lookup', 'a318bee08397dcafb9b7c9a26cef11a4ccff22257e00c5de68c4b90399a4917a', 1796145729.85576, '{"ok": true, "result": "value of t"}', 1796145729.85576);
INSERT INTO legacy.ledger VALUES ('legacy-turn-1', 't1', 'lookup', 'f2dbecacc1248553e09c72dc43142d77d2a73926e588a0a15875cd0f906920b3', 1796145729.8681386, '{"ok": true, "result": "value of x"}', 1796145729.8681386);


--
-- Data for Name: messages; Type: TABLE DATA; Schema: legacy; Owner: -
--

INSERT INTO legacy.messages VALUES ('legacy-completed', 0, '{"content":"please move 5","role":"user"}', '24d65570ee2b73b2656968e1b72e0673421060e8fe80a227c2d5512488a807f6');
INSERT INTO legacy.messages VALUES ('legacy-completed', 1, '{"content":null,"role":"assistant","tool_calls":[{"arguments":"{\"key\": \"a\"}","id":"c1","name":"lookup"},{"arguments":"{\"amount\": 5}","id":"c2","name":"transfer"}]}', '0f2355f4bac2478f14d1d077e3a4750499bdf5d0e66d645ba6f3fa2b214bcb79');
INSERT INTO legacy.messages VALUES ('legacy-completed', 2, '{"content":"{\"ok\": true, \"result\": \"value of a\"}","role":"tool","tool_call_id":"c1"}', '6d371f9b94f7f3345b74f7b5be6eb47fb1c191f1c3a3f78d0df71f9069e6ea06');
INSERT INTO legacy.messages VALUES ('legacy-completed', 3, '{"content":"{\"ok\": true, \"result\": {\"moved\": 5, \"key\": \"legacy-completed:c2\"}}","role":"tool","tool_call_id":"c2"}', '640636bdc30905ed3dd434b8a06664c56222e0b270e5a07cfbd0b6fbb05e4f40');
INSERT INTO legacy.messages VALUES ('legacy-completed', 4, '{"content":null,"role":"assistant","tool_calls":[{"arguments":"{\"key\": \"b\"}","id":"c3","name":"lookup"}]}', '885393b73d68f9a542386955ebf209a7794292cc0dbd05695b0f1d1a7814106d');
INSERT INTO legacy.messages VALUES ('legacy-completed', 5, '{"content":"{\"ok\": true, \"result\": \"value of b\"}","role":"tool","tool_call_id":"c3"}', '202b537c501a42f8657df93fca7ee3cbc65c4c722a281be144cb1fe260e660cf');
INSERT INTO legacy.messages VALUES ('legacy-completed', 6, '{"content":"all done","role":"assistant"}', '2e6b45b3a915621596ac36cc64149d2048663122050774e181fb31b033b5ab34');
INSERT INTO legacy.messages VALUES ('legacy-paused', 0, '{"content":"refund T-9","role":"user"}', '037b3f8d680ece96a226c2b65407922b0a7c78009f50f5055201003af18d7a28');
INSERT INTO legacy.messages VALUES ('legacy-paused', 1, '{"content":null,"role":"assistant","tool_calls":[{"arguments":"{\"key\": \"t\"}","id":"r1","name":"lookup"}]}', '9d35a38475bf3f10a66c8292f830b67b6502e6d41b31deab667ced3463b12c94');
INSERT INTO legacy.messages VALUES ('legacy-paused', 2, '{"content":"{\"ok\": true, \"result\": \"value of t\"}","role":"tool","tool_call_id":"r1"}', '21331b8e353cf08ee5f0298ca0c3310c20c596cc0f41d6660160adfabd6ee95b');
INSERT INTO legacy.messages VALUES ('legacy-paused', 3, '{"content":null,"role":"assistant","tool_calls":[{"arguments":"{\"ticket\": \"T-9\"}","id":"r2","name":"refund"}]}', '0bd86bde8307075e63595e4669eece90853d100c70f862e6ef9fee112aae7d26');
INSERT INTO legacy.messages VALUES ('legacy-turn-1', 0, '{"content":"what is x?","role":"user"}', '7f2d5543937fe4480a044349dc95a2369b57514651881c92e31a2b938d72a1a7');
INSERT INTO legacy.messages VALUES ('legacy-turn-1', 1, '{"content":null,"role":"assistant","tool_calls":[{"arguments":"{\"key\": \"x\"}","id":"t1","name":"lookup"}]}', 'e16a367995ac423364fd2c8d4a0f2be6d0a675a13d8c5fe413cdff41607e8d5a');
INSERT INTO legacy.messages VALUES ('legacy-turn-1', 2, '{"content":"{\"ok\": true, \"result\": \"value of x\"}","role":"tool","tool_call_id":"t1"}', 'dd52c93b13b1a12c75c4563737aa5c73fccba774a0df5a7842119af2e212235a');
INSERT INTO legacy.messages VALUES ('legacy-turn-1', 3, '{"content":"x is known","role":"assistant"}', '867a724b5ec35c2150aea64936b4bce87e6c08b024cb4f720e669462bde3220a');
INSERT INTO legacy.messages VALUES ('legacy-turn-2', 4, '{"content":"and again?","role":"user"}', 'e45a42fc94dc083d42596d0659ad1fd2a4bbc814560c66beaaf171bc9cb697a4');
INSERT INTO legacy.messages VALUES ('legacy-turn-2', 5, '{"content":"still known","role":"assistant"}', 'bf1806f188c6d07b2a815901e798e4d1207105532b7eb68eee659f53f9cd2574');


--
-- Data for Name: runs; Type: TABLE DATA; Schema: legacy; Owner: -
--

INSERT INTO legacy.runs VALUES ('legacy-completed', 1796145729.7876494, 1796145729.8503346, 'completed', '{"id":"local","roles":[],"scopes":["*"]}', '{"log_content":false}', '{"budget":{"deadline_seconds":null,"loop_limit":3,"max_input_tokens":null,"max_output_tokens":null,"max_repairs":1,"max_steps":8,"max_tool_calls":32,"max_total_tokens":null},"compat":{"accept_empty_finish_reason_with_calls":false,"allow_stop_with_tool_calls":false,"answer_after_success":false,"call_first":false,"synthesize_missing_ids":false},"fallback_answer":"I could not complete this request with the available tools."}', '{"status": "completed", "started_at": 1796145729.7876086, "steps": 3, "tool_calls": 3, "usage": [30, 15], "usage_estimated": false, "failed_repairs": 0, "last_signature": "c0be70f6a8c2a0fe02e00d2d206cf8acd09c116609a5dd938fe7e8277f444c1f", "repeats": 1, "tainted": false, "tainted_by": null, "pending": [], "approvals": {}, "unknown": [], "output": "all done", "reason": null}', 7, '2e6b45b3a915621596ac36cc64149d2048663122050774e181fb31b033b5ab34', 16, '6c24931212f4973b9a3372ff54d40be4afeff935ef2663f75739e815c4d12ae8', 'sha256:494d0fc5b450ccc0cfab96ab09d2b2eb353b4147039b64f6b26ead3023d8f600', NULL, NULL, NULL, NULL, 0);
INSERT INTO legacy.runs VALUES ('legacy-paused', 1796145729.8545163, 1796145729.8629832, 'awaiting_tools', '{"id":"local","roles":[],"scopes":["*"]}', '{"log_content":false}', '{"budget":{"deadline_seconds":null,"loop_limit":3,"max_input_tokens":null,"max_output_tokens":null,"max_repairs":1,"max_steps":8,"max_tool_calls":32,"max_total_tokens":null},"compat":{"accept_empty_finish_reason_with_calls":false,"allow_stop_with_tool_calls":false,"answer_after_success":false,"call_first":false,"synthesize_missing_ids":false},"fallback_answer":"I could not complete this request with the available tools."}', '{"status": "awaiting_tools", "started_at": 1796145729.8544953, "steps": 2, "tool_calls": 1, "usage": [20, 10], "usage_estimated": false, "failed_repairs": 0, "last_signature": "03dfdf465c2b5708ca80adb1b7d83117af00b5376b0d2254ab5b5be8098ad1cc", "repeats": 1, "tainted": false, "tainted_by": null, "pending": [{"call_id": "r2", "tool": "refund", "arguments": {"ticket": "T-9"}, "fingerprint": "03dfdf465c2b5708ca80adb1b7d83117af00b5376b0d2254ab5b5be8098ad1cc", "read_only": false, "execute": true, "needs_approval": true, "untrusted_output": false, "result": null, "approval_reason": "refund requires approval"}], "approvals": {"r2": {"fingerprint": "03dfdf465c2b5708ca80adb1b7d83117af00b5376b0d2254ab5b5be8098ad1cc", "approved": true, "reason": null}}, "unknown": [], "output": null, "reason": null}', 4, '0bd86bde8307075e63595e4669eece90853d100c70f862e6ef9fee112aae7d26', 10, '44c7d6945cc7fbfdf5dfa92bdec0b122ab2eb181fb92d5265c4a7c0361625af0', 'sha256:e153071c2fcaa6b0ab0248ee8a3ea665a4c570a0df1a1e3d32b98280790d6b26', NULL, NULL, NULL, NULL, 0);
INSERT INTO legacy.runs VALUES ('legacy-turn-1', 1796145729.8666353, 1796145729.8741238, 'completed', '{"id":"local","roles":[],"scopes":["*"]}', '{"log_content":false}', '{"budget":{"deadline_seconds":null,"loop_limit":3,"max_input_tokens":null,"max_output_tokens":null,"max_repairs":1,"max_steps":8,"max_tool_calls":32,"max_total_tokens":null},"compat":{"accept_empty_finish_reason_with_calls":false,"allow_stop_with_tool_calls":false,"answer_after_success":false,"call_first":false,"synthesize_missing_ids":false},"fallback_answer":"I could not complete this request with the available tools."}', '{"status": "completed", "started_at": 1796145729.8666134, "steps": 2, "tool_calls": 1, "usage": [20, 10], "usage_estimated": false, "failed_repairs": 0, "last_signature": "f2dbecacc1248553e09c72dc43142d77d2a73926e588a0a15875cd0f906920b3", "repeats": 1, "tainted": false, "tainted_by": null, "pending": [], "approvals": {}, "unknown": [], "output": "x is known", "reason": null}', 4, '867a724b5ec35c2150aea64936b4bce87e6c08b024cb4f720e669462bde3220a', 8, '9a4186ff8c1ca9a0a3e69b98de021c19b8fb3e74d3895150f036dba34118e4df', 'sha256:4187152bfd45fb9cce4cea645c0298283fd4f4e38afad586a7e4ca7aa2b36e04', NULL, NULL, '14b5d7775bc248e18a33570245ee0ec3', 1, 0);
INSERT INTO legacy.runs VALUES ('legacy-turn-2', 1796145729.8750396, 1796145729.8758957, 'completed', '{"id":"local","roles":[],"scopes":["*"]}', '{"log_content":false}', '{"budget":{"deadline_seconds":null,"loop_limit":3,"max_input_tokens":null,"max_output_tokens":null,"max_repairs":1,"max_steps":8,"max_tool_calls":32,"max_total_tokens":null},"compat":{"accept_empty_finish_reason_with_calls":false,"allow_stop_with_tool_calls":false,"answer_after_success":false,"call_first":false,"synthesize_missing_ids":false},"fallback_answer":"I could not complete this request with the available tools."}', '{"status": "completed", "started_at": 1796145729.8750205, "steps": 1, "tool_calls": 0, "usage": [10, 5], "usage_estimated": false, "failed_repairs": 0, "last_signature": null, "repeats": 0, "tainted": false, "tainted_by": null, "pending": [], "approvals": {}, "unknown": [], "output": "still known", "reason": null}', 6, 'bf1806f188c6d07b2a815901e798e4d1207105532b7eb68eee659f53f9cd2574', 4, '03201e25df246175418f1a43bd9180d94907134904cc58536fb2a80c3dd9de6b', 'sha256:fa72f08bb87670c951630aff3ffa341e881ddc0708af7a190a9e4411f68648c7', NULL, NULL, '14b5d7775bc248e18a33570245ee0ec3', 2, 4);


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: legacy; Owner: -
--

INSERT INTO legacy.schema_migrations VALUES (1, 'm1_initial', 1796145729.7456439);
INSERT INTO legacy.schema_migrations VALUES (2, 'm2_conversations', 1796145729.761507);


--
-- Name: conversations conversations_pkey; Type: CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.conversations
    ADD CONSTRAINT conversations_pkey PRIMARY KEY (id);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (run_id, seq);


--
-- Name: ledger ledger_pkey; Type: CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.ledger
    ADD CONSTRAINT ledger_pkey PRIMARY KEY (run_id, call_id);


--
-- Name: messages messages_pkey; Type: CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (run_id, seq);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: runs_by_conversation; Type: INDEX; Schema: legacy; Owner: -
--

CREATE INDEX runs_by_conversation ON legacy.runs USING btree (conversation_id, turn);


--
-- Name: runs_by_principal; Type: INDEX; Schema: legacy; Owner: -
--

CREATE INDEX runs_by_principal ON legacy.runs USING btree ((((principal)::jsonb ->> 'id'::text)), created_at);


--
-- Name: runs_by_status; Type: INDEX; Schema: legacy; Owner: -
--

CREATE INDEX runs_by_status ON legacy.runs USING btree (status, updated_at);


--
-- Name: events events_run_id_fkey; Type: FK CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.events
    ADD CONSTRAINT events_run_id_fkey FOREIGN KEY (run_id) REFERENCES legacy.runs(id);


--
-- Name: ledger ledger_run_id_fkey; Type: FK CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.ledger
    ADD CONSTRAINT ledger_run_id_fkey FOREIGN KEY (run_id) REFERENCES legacy.runs(id);


--
-- Name: messages messages_run_id_fkey; Type: FK CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.messages
    ADD CONSTRAINT messages_run_id_fkey FOREIGN KEY (run_id) REFERENCES legacy.runs(id);


--
-- Name: runs runs_conversation_id_fkey; Type: FK CONSTRAINT; Schema: legacy; Owner: -
--

ALTER TABLE ONLY legacy.runs
    ADD CONSTRAINT runs_conversation_id_fkey FOREIGN KEY (conversation_id) REFERENCES legacy.conversations(id);


--
-- PostgreSQL database dump complete
--

\unrestrict wrBLRByOlsEIcvZvtrlUHM0GqbWsIt1qTbk9PAHRdky9KugKXrRPnh4QAICmA9u

