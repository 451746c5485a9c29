"""Purchase sharing KEEP_FIRST as a grpcio client sees it: a second user's submission of an original
transaction that the first user owns is refused per item (ItemError code FAILED_PRECONDITION, reason
OWNED_BY_ANOTHER_USER); the rest of the request is stored.

usage: purchase_sharing.py GRPC_ADDR OPERATOR_KEY PROTOS_DIR
Prints `ok` or `FAIL` for every check, then `N passed, N failed`; exits 1 on a failure.
"""
import json, sys

import grpc

import substatus_python

grpc_addr, operator_key, protos = sys.argv[1:4]
substatus_python.generate(protos)
from substatus.v1 import admin_service_pb2 as admin_pb, admin_service_pb2_grpc as admin_grpc
from substatus.v1 import common_pb2, transaction_pb2
from substatus.v1 import ingest_service_pb2 as ingest_pb, ingest_service_pb2_grpc as ingest_grpc

results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f": {detail}"))


# user-1 owns original transaction 1000 (its trial, stored by setup_tenant).
admin_key, app_id, _ = substatus_python.setup_tenant(grpc_addr, operator_key, "purchase sharing")
channel = grpc.insecure_channel(grpc_addr)
auth = (("authorization", f"Bearer {admin_key}"),)
admin = admin_grpc.AdminServiceStub(channel)
ingest = ingest_grpc.IngestServiceStub(channel)

policy = common_pb2.EligibilityPolicy(purchase_sharing=common_pb2.PURCHASE_SHARING_KEEP_FIRST)
app = admin.SetPolicy(admin_pb.SetPolicyRequest(app_id=app_id, policy=policy, update_mask=["purchase_sharing"]),
                      metadata=auth).app
check("SetPolicy returns KEEP_FIRST", app.policy.purchase_sharing == common_pb2.PURCHASE_SHARING_KEEP_FIRST, app.policy)
check("the other switches keep their values", app.policy.lapsed_subscribers_get_intro, app.policy)

renewal = transaction_pb2.Transaction(transaction_id="1001", original_transaction_id="1000", product_id="premium.monthly",
                                      purchase_date_ms=1704672000000, expires_date_ms=1707350400000)
own = transaction_pb2.Transaction(transaction_id="5000", original_transaction_id="5000", product_id="premium.yearly",
                                  purchase_date_ms=1704672000000, expires_date_ms=1736208000000)
info = transaction_pb2.RenewalInfo(original_transaction_id="1000", product_id="premium.monthly",
                                   auto_renew_product_id="premium.monthly", auto_renew_enabled=True)
answer = ingest.ImportTransactions(
    ingest_pb.ImportTransactionsRequest(app_id=app_id, user_id="user-2", transactions=[renewal, own], renewal_infos=[info]),
    metadata=auth)
first, second = answer.transaction_results
check("the owned transaction is rejected", first.outcome == ingest_pb.IMPORT_OUTCOME_REJECTED, first)
check("with FAILED_PRECONDITION", first.error.code == substatus_python.GRPC_CODE["failed_precondition"], first.error)
check("and reason OWNED_BY_ANOTHER_USER", first.error.reason == "OWNED_BY_ANOTHER_USER", first.error)
check("the user's own transaction is created", second.outcome == ingest_pb.IMPORT_OUTCOME_CREATED, second)
check("the renewal info of the owned subscription is rejected too",
      [r.error.reason for r in answer.renewal_info_results] == ["OWNED_BY_ANOTHER_USER"], answer.renewal_info_results)

body = {"status": 0, "environment": "Production", "latest_receipt_info": [
    {"product_id": "premium.monthly", "transaction_id": "1000", "original_transaction_id": "1000",
     "purchase_date_ms": "1704067200000", "expires_date_ms": "1704672000000", "is_trial_period": "true"}]}
receipt = ingest.ImportReceiptResponse(
    ingest_pb.ImportReceiptResponseRequest(app_id=app_id, user_id="user-3", verify_receipt_response_json=json.dumps(body).encode()),
    metadata=auth)
refused = [(r.original_transaction_id, r.error.code, r.error.reason) for r in receipt.refused_original_transactions]
check("ImportReceiptResponse names the refused original transaction", refused == [("1000", 9, "OWNED_BY_ANOTHER_USER")], refused)
check("and stores none of it", receipt.stored_transaction_count == 0 and receipt.transaction_count == 1, receipt)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
