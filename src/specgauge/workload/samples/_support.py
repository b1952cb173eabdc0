"""Segment ``support_summary``: a customer-support ticket thread -> a handover summary.

The thread has customer and agent turns with order ids, product names and error codes; the answer is
``Issue / Steps taken / Next action``. Real summaries copy ids, codes and the agent's own wording of
what was done, and paraphrase the rest — a medium copy rate.
"""

from __future__ import annotations

import random
from typing import Any

from ._common import (
    CARRIERS, PRODUCTS, SHOPS, Example, Lang, agent_name, fill, hex_id, iso_date, josa, ko_date,
    money, order_id, person, pick_lang, ticket_id,
)

COLORS = [("black", "블랙"), ("white", "화이트"), ("sage green", "세이지 그린"), ("navy", "네이비"),
          ("sand beige", "샌드 베이지")]
#: relative follow-up days ("on Friday" / "금요일에"): a summary should not invent calendar dates
WEEKDAYS = (["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"], ["월요일", "화요일", "수요일", "목요일", "금요일"])
PLANS = [("Care+ protection plan", "케어플러스 보호 플랜"), ("Plus membership", "플러스 멤버십"),
         ("Filter Club refills", "필터 클럽 정기배송")]

# Each scenario: a code pattern ('#' -> digit) and, per language, turn templates. ``steps`` pairs what
# the agent said with how a summary states it; every other key is a list of variants.
SCENARIOS: list[dict[str, Any]] = [
    {"name": "firmware_wifi", "code": "E-10##", "en": {
        "complaint": [
            "Hi, since the firmware update on {date} my {product} keeps dropping the connection every few minutes. The app shows error {code}. I work from home so this is urgent. Order number is {order}.",
            "Hello, my {product} (order {order}) stopped holding a Wi-Fi connection after the update on {date}. The status light blinks orange and the app says {code}. I already restarted it twice.",
        ],
        "ask": [
            "Could you tell me the firmware version shown under Settings > About, and whether the drops happen on both the 2.4 GHz and 5 GHz bands?",
            "Which firmware version does Settings > About show, and do both bands drop or only one?",
        ],
        "info": ["It says firmware {fw}. Both bands drop, the 5 GHz one more often.", "Firmware {fw}. It happens on both bands."],
        "steps": [
            ("I have pushed a rollback to firmware {fw_old} from our side; the router will restart within 10 minutes.",
             "Pushed a rollback to firmware {fw_old} from our side; the router restarted."),
            ("I also reset the cloud pairing for your device, so please sign in to the app again after the restart.",
             "Reset the cloud pairing; the customer has to sign in to the app again."),
        ],
        "followup": ["OK, it restarted and the connection looks stable for now.", "Done, I signed in again. No drops in the last half hour."],
        "issue": ["{product} (order {order}) drops Wi-Fi every few minutes since the firmware {fw} update on {date}; the app shows error {code}."],
        "next": ["Check back with {first} on {followup_date}; if error {code} comes back, send a replacement unit under warranty.",
                 "Keep the ticket open for 48 hours and escalate to the firmware team if {code} reappears on {fw_old}."],
    }, "ko": {
        "complaint": [
            "안녕하세요. {date} 펌웨어 업데이트 이후로 {product}{ga} 몇 분마다 계속 연결이 끊깁니다. 앱에는 {code} 오류가 뜹니다. 재택근무 중이라 급합니다. 주문번호는 {order}입니다.",
            "{product} 관련 문의입니다(주문번호 {order}). {date}에 업데이트한 뒤로 와이파이 연결이 자꾸 끊기고, 상태 표시등이 주황색으로 깜빡이며 앱에 {code} 오류가 표시됩니다. 이미 두 번 재시작해 봤어요.",
        ],
        "ask": [
            "설정 > 기기 정보에 표시되는 펌웨어 버전과, 2.4GHz와 5GHz 대역 모두에서 끊기는지 알려주시겠어요?",
            "설정 > 기기 정보의 펌웨어 버전을 확인해 주시고, 두 대역 모두 끊기는지도 알려주세요.",
        ],
        "info": ["펌웨어 버전은 {fw}입니다. 두 대역 다 끊기는데 5GHz가 더 자주 끊겨요.", "펌웨어 버전은 {fw}입니다. 2.4GHz, 5GHz 둘 다 끊깁니다."],
        "steps": [
            ("고객님 기기에 펌웨어 {fw_old} 버전으로 롤백을 원격으로 적용했습니다. 10분 안에 공유기가 재시작됩니다.",
             "펌웨어 {fw_old} 버전으로 원격 롤백을 적용했고, 공유기가 재시작됨."),
            ("클라우드 연동도 초기화해 두었으니 재시작 후 앱에 다시 로그인해 주세요.",
             "클라우드 연동을 초기화함. 고객이 앱에 다시 로그인해야 함."),
        ],
        "followup": ["재시작됐고 지금은 연결이 안정적인 것 같아요.", "다시 로그인했습니다. 30분 동안 한 번도 안 끊겼어요."],
        "issue": ["{product}(주문번호 {order}){ga} {date} 펌웨어 {fw} 업데이트 이후 몇 분마다 와이파이 연결이 끊기며, 앱에 {code} 오류가 표시됨."],
        "next": ["{followup_date}에 {name}님께 다시 연락해 상태를 확인하고, {code} 오류가 재발하면 보증 교체품을 발송.",
                 "48시간 동안 티켓을 열어 두고, 펌웨어 {fw_old}에서도 {code} 오류가 재발하면 펌웨어 팀에 이관."],
    }},
    {"name": "refund_missing", "code": "RFD-2##", "en": {
        "complaint": [
            "Hi, I returned the {product} from order {order} on {date} and the tracking shows you received it, but I still haven't got my refund of {amount}. It's been over two weeks.",
            "Hello, where is my refund? Order {order}, {product}, returned on {date}. {amount} has not come back to my card.",
        ],
        "ask": ["Could you confirm the last four digits of the card you paid with?",
                "To locate the payment, can you share the last four digits of the card used for order {order}?"],
        "info": ["It ends in {last4}.", "Card ending {last4}."],
        "steps": [
            ("I can see the return was checked in at our warehouse, but the refund is stuck with status {code} because the return label was scanned twice.",
             "Found the refund stuck with status {code} (return label scanned twice) although the warehouse checked the item in."),
            ("I have released the refund of {amount} manually to the card ending {last4}; it usually shows up within 3-5 business days.",
             "Released the refund of {amount} manually to the card ending {last4}."),
        ],
        "followup": ["Great, thanks. I'll watch my statement.", "OK, please let me know if anything changes."],
        "issue": ["Refund of {amount} for the returned {product} (order {order}, returned {date}) never reached the customer; the refund was stuck with status {code}."],
        "next": ["If the refund is not visible on the card ending {last4} by {followup_date}, ask finance for the bank reference number.",
                 "No action unless {first} writes back; close the ticket on {followup_date}."],
    }, "ko": {
        "complaint": [
            "안녕하세요. 주문번호 {order}의 {product}{eul} {date}에 반품했고 배송 조회상으로도 입고 완료로 나오는데, 아직 {amount} 환불을 받지 못했습니다. 2주가 넘었어요.",
            "환불이 아직 안 들어왔습니다. 주문번호 {order}, {product}, {date}에 반품했어요. 카드로 {amount}이 돌아오지 않았습니다.",
        ],
        "ask": ["결제하신 카드 번호 마지막 네 자리를 알려주시겠어요?", "확인을 위해 주문 {order} 결제에 사용하신 카드의 끝 네 자리를 알려주세요."],
        "info": ["{last4}입니다.", "카드 끝자리는 {last4}입니다."],
        "steps": [
            ("창고 입고는 확인되었지만, 반품 송장이 두 번 스캔되어 환불이 {code} 상태로 멈춰 있었습니다.",
             "창고 입고는 확인되었으나 반품 송장 중복 스캔으로 환불이 {code} 상태로 멈춰 있었음."),
            ("끝자리 {last4} 카드로 {amount} 환불을 수동 처리했습니다. 보통 영업일 기준 3~5일 안에 반영됩니다.",
             "끝자리 {last4} 카드로 {amount} 환불을 수동 처리함."),
        ],
        "followup": ["네, 감사합니다. 카드 내역 확인해 볼게요.", "알겠습니다. 변동 있으면 알려주세요."],
        "issue": ["반품한 {product}(주문번호 {order}, {date} 반품)의 환불 {amount}이 지급되지 않음. 환불이 {code} 상태로 멈춰 있었음."],
        "next": ["{followup_date}까지 끝자리 {last4} 카드에 환불이 보이지 않으면 재무팀에 은행 거래 번호를 요청.",
                 "고객 회신이 없으면 {followup_date}에 티켓 종료."],
    }},
    {"name": "double_charge", "code": "PAY-4##", "en": {
        "complaint": [
            "I was charged twice for order {order}! Two payments of {amount} on my card ending {last4} on {date}. Please fix this.",
            "Hi, my bank app shows two charges of {amount} for the {product} (order {order}), card ending {last4}. I only placed one order.",
        ],
        "ask": ["Are both charges marked as pending, or has one of them already posted?",
                "Could you check whether both charges are still pending in your bank app?"],
        "info": ["One is posted, the other still says pending.", "Both say pending."],
        "steps": [
            ("Our payment log shows error {code}: the checkout retried after a timeout and created a second authorization.",
             "Payment log shows error {code}: checkout retried after a timeout and created a second authorization."),
            ("I have voided the duplicate authorization of {amount}; the pending charge should drop off within 2 business days.",
             "Voided the duplicate authorization of {amount} on the card ending {last4}."),
        ],
        "followup": ["Thank you, I'll check again on Monday.", "OK, thanks for sorting it out quickly."],
        "issue": ["Customer was charged {amount} twice for order {order} ({product}) on the card ending {last4}; cause was error {code}, a duplicate authorization after a checkout retry."],
        "next": ["Confirm with {first} on {followup_date} that only one charge of {amount} remains; report {code} to the payments team."],
    }, "ko": {
        "complaint": [
            "주문 {order} 결제가 두 번 됐어요! {date}에 끝자리 {last4} 카드로 {amount}씩 두 건이 결제됐습니다. 확인 부탁드립니다.",
            "{product}(주문번호 {order}) 하나만 주문했는데 은행 앱에 끝자리 {last4} 카드로 {amount} 결제가 두 번 찍혀 있어요.",
        ],
        "ask": ["두 건 모두 승인 대기 상태인지, 한 건은 이미 결제 완료로 바뀌었는지 확인해 주시겠어요?",
                "은행 앱에서 두 건이 모두 아직 승인 대기 상태인지 확인 부탁드립니다."],
        "info": ["한 건은 결제 완료, 다른 한 건은 아직 승인 대기로 나와요.", "두 건 다 승인 대기예요."],
        "steps": [
            ("결제 로그를 보니 {code} 오류가 있었습니다. 타임아웃 후 결제가 재시도되면서 승인이 한 번 더 생성되었습니다.",
             "결제 로그에서 {code} 오류 확인. 타임아웃 후 재시도로 승인이 중복 생성됨."),
            ("중복된 {amount} 승인 건은 취소 처리했습니다. 영업일 기준 2일 안에 대기 중인 결제가 사라질 거예요.",
             "중복된 {amount} 승인 건을 취소 처리함(끝자리 {last4} 카드)."),
        ],
        "followup": ["감사합니다. 월요일에 다시 확인해 볼게요.", "빠르게 처리해 주셔서 감사합니다."],
        "issue": ["주문 {order}({product}) 결제 시 끝자리 {last4} 카드에 {amount}이 두 번 청구됨. 원인은 {code} 오류로 인한 중복 승인."],
        "next": ["{followup_date}에 {amount} 결제가 한 건만 남았는지 고객과 확인하고, {code} 오류를 결제팀에 공유."],
    }},
    {"name": "not_received", "code": "TRC-####", "en": {
        "complaint": [
            "Tracking for order {order} says the {product} was delivered on {date}, but nothing arrived. Tracking number {tracking} with {carrier}.",
            "Hi, {carrier} marked my package {tracking} as delivered on {date} but it's not at my door or with my neighbours. Order {order}.",
        ],
        "ask": ["Could you confirm the delivery address and whether the building has a parcel room or locker?"],
        "info": ["Address is correct. There is a parcel room but it's not there either.", "The address is right, and I checked the lobby locker."],
        "steps": [
            ("I have opened a trace with {carrier} for tracking number {tracking} (case {code}); they usually reply within 48 hours.",
             "Opened a trace with {carrier} for tracking number {tracking} (case {code})."),
            ("I've also reserved a replacement {product} so it can ship the same day if the trace comes back negative.",
             "Reserved a replacement {product} to ship the same day if the trace is negative."),
        ],
        "followup": ["OK, thanks. Please keep me posted.", "Thank you, I'll wait for the result."],
        "issue": ["{carrier} tracking {tracking} shows order {order} ({product}) delivered on {date}, but the customer never received it."],
        "next": ["Check the {carrier} trace {code} on {followup_date}; if it is negative, ship the reserved replacement."],
    }, "ko": {
        "complaint": [
            "주문 {order} 배송 조회에 {date} 배송 완료로 나오는데 {product}{ga} 도착하지 않았어요. {carrier} 운송장 번호는 {tracking}입니다.",
            "{carrier}에서 운송장 {tracking} 택배가 {date}에 배송 완료됐다고 하는데 문 앞에도 없고 경비실에도 없습니다. 주문번호는 {order}입니다.",
        ],
        "ask": ["배송지 주소가 맞는지, 건물에 무인택배함이나 택배 보관실이 있는지 확인 부탁드립니다."],
        "info": ["주소는 맞아요. 택배 보관실도 확인했는데 없습니다.", "주소 맞고, 무인택배함도 봤어요."],
        "steps": [
            ("{carrier}에 운송장 {tracking} 건으로 배송 추적 조사를 요청했습니다(조사번호 {code}). 보통 48시간 안에 회신이 옵니다.",
             "{carrier}에 운송장 {tracking} 배송 추적 조사 요청(조사번호 {code})."),
            ("조사 결과가 분실로 나오면 당일 발송할 수 있도록 {product} 교환품도 미리 확보해 두었습니다.",
             "분실로 확인되면 당일 발송하도록 {product} 교환품을 확보해 둠."),
        ],
        "followup": ["네, 진행 상황 알려주세요.", "감사합니다. 결과 기다릴게요."],
        "issue": ["{carrier} 운송장 {tracking} 기준 주문 {order}의 {product}{ga} {date} 배송 완료로 표시되었으나 고객이 받지 못함."],
        "next": ["{followup_date}에 {carrier} 조사 {code} 결과를 확인하고, 분실이면 확보해 둔 교환품을 발송."],
    }},
    {"name": "login_2fa", "code": "AUTH-4##", "en": {
        "complaint": [
            "I can't log in to my {shop} account. The verification code never arrives by SMS and after three tries I get error {code}.",
            "Hi, login keeps failing with {code}. I changed my phone number last week and I think the codes go to the old one.",
        ],
        "ask": ["For security, could you confirm the email on the account and the last two digits of your new phone number?"],
        "info": ["Email is {email}, new number ends in {d2}."],
        "steps": [
            ("The account was still linked to your old number, so the codes went there; I have updated it to the number ending {d2}.",
             "Account was still linked to the old phone number; updated it to the number ending {d2}."),
            ("I have also cleared the lock caused by error {code}, so you can request a new code now.",
             "Cleared the lock caused by error {code}."),
        ],
        "followup": ["It worked, I'm in. Thanks!", "Got the code this time, thank you."],
        "issue": ["Customer ({email}) could not log in: verification codes went to an old phone number and repeated tries locked the account with error {code}."],
        "next": ["None needed; close the ticket if {first} confirms, and suggest an authenticator app as a backup.",
                 "Close the ticket on {followup_date} if there is no reply."],
    }, "ko": {
        "complaint": [
            "{shop} 계정에 로그인이 안 됩니다. 문자 인증번호가 오지 않고, 세 번 시도하니 {code} 오류가 떠요.",
            "로그인할 때마다 {code} 오류가 납니다. 지난주에 휴대폰 번호를 바꿨는데 인증번호가 예전 번호로 가는 것 같아요.",
        ],
        "ask": ["본인 확인을 위해 계정 이메일과 새 휴대폰 번호 끝 두 자리를 알려주세요."],
        "info": ["이메일은 {email}이고, 새 번호 끝자리는 {d2}입니다."],
        "steps": [
            ("확인해 보니 계정에 예전 번호가 그대로 등록되어 있어 인증번호가 그쪽으로 발송되었습니다. 끝자리 {d2} 번호로 변경해 드렸습니다.",
             "계정에 예전 휴대폰 번호가 등록되어 있어 인증번호가 잘못 발송됨. 끝자리 {d2} 번호로 변경함."),
            ("{code} 오류로 걸린 잠금도 해제했으니 지금 새 인증번호를 요청하시면 됩니다.",
             "{code} 오류로 인한 계정 잠금을 해제함."),
        ],
        "followup": ["이제 로그인됩니다. 감사합니다!", "이번엔 인증번호가 왔어요. 고맙습니다."],
        "issue": ["고객({email})이 로그인하지 못함. 인증번호가 예전 휴대폰 번호로 발송되었고, 반복 시도로 {code} 오류와 함께 계정이 잠김."],
        "next": ["추가 조치 없음. 고객이 확인하면 티켓을 종료하고, 백업 수단으로 인증 앱 등록을 안내.",
                 "회신이 없으면 {followup_date}에 티켓 종료."],
    }},
    {"name": "wrong_variant", "code": "PCK-###", "en": {
        "complaint": [
            "I ordered the {product} in {want} (order {order}) but received a {got} one. I need the right one before {date}.",
            "Wrong colour delivered for order {order}: the box of my {product} says {got}, my order confirmation says {want}.",
        ],
        "ask": ["Could you send a photo of the label on the box so I can check the SKU?"],
        "info": ["Sure, photo attached. The label says {sku}."],
        "steps": [
            ("SKU {sku} is the {got} variant, so our warehouse picked the wrong item; I've logged it as picking error {code}.",
             "Confirmed from the label (SKU {sku}) that the warehouse picked the {got} variant; logged picking error {code}."),
            ("I have sent a free return label to {email} and shipped the {want} one by express; it should arrive in 2 days.",
             "Emailed a free return label to {email} and shipped the {want} one by express."),
        ],
        "followup": ["Perfect, thank you!", "Thanks, I'll drop the wrong one off tomorrow."],
        "issue": ["Order {order}: customer ordered the {product} in {want} but received {got} (SKU {sku}); warehouse picking error {code}."],
        "next": ["Make sure the {got} unit comes back with the label sent to {email} within 14 days; otherwise charge the difference.",
                 "Track the express shipment and confirm delivery with {first} before {date}."],
    }, "ko": {
        "complaint": [
            "{product}{eul} {want} 색상으로 주문했는데(주문번호 {order}) {got} 제품이 왔어요. {date} 전에 제대로 된 제품이 필요합니다.",
            "주문 {order} 색상이 잘못 왔습니다. {product} 상자에는 {got}, 주문 확인서에는 {want}로 되어 있어요.",
        ],
        "ask": ["SKU를 확인할 수 있게 상자 라벨 사진을 보내주시겠어요?"],
        "info": ["사진 첨부합니다. 라벨 번호는 {sku}입니다."],
        "steps": [
            ("SKU {sku} 상품은 {got} 모델이라 창고에서 상품을 잘못 출고했습니다. 출고 오류 {code}로 등록했습니다.",
             "라벨(SKU {sku})로 창고에서 {got} 모델을 잘못 출고한 것을 확인. 출고 오류 {code}로 등록함."),
            ("{email}로 무료 반품 라벨을 보내드렸고, {want} 제품은 빠른배송으로 발송했습니다. 2일 안에 도착할 거예요.",
             "{email}로 무료 반품 라벨을 발송하고 {want} 제품을 빠른배송으로 출고함."),
        ],
        "followup": ["완벽해요, 감사합니다!", "내일 잘못 온 제품 반품할게요."],
        "issue": ["주문 {order}: 고객은 {product} {want} 색상을 주문했으나 {got}(SKU {sku}) 제품을 받음. 창고 출고 오류 {code}."],
        "next": ["{email}로 보낸 라벨로 14일 안에 {got} 제품이 회수되는지 확인하고, 미회수 시 차액 청구.",
                 "빠른배송을 추적하고 {date} 전에 고객에게 수령 여부 확인."],
    }},
    {"name": "no_power", "code": "E-00##", "en": {
        "complaint": [
            "My {product} won't turn on anymore. Bought it on {date}, order {order}. It shows a red light for a second and then error {code} flashes.",
            "Hi, the {product} from order {order} died today. No power at all apart from a quick red blink ({code}). It's only a few months old.",
        ],
        "ask": ["Could you try a different outlet and hold the power button for 15 seconds, then tell me what happens?"],
        "info": ["Tried both, same red blink and {code}.", "Different outlet, held it for 15 seconds, still {code}."],
        "steps": [
            ("Thanks for testing. Error {code} points to a failed power board, which is covered by the 12-month warranty.",
             "Customer tried another outlet and a 15-second reset; error {code} persists, which points to a failed power board covered by warranty."),
            ("I have created warranty claim {claim} and emailed a prepaid label to {email}; the replacement ships as soon as the carrier scans the parcel.",
             "Created warranty claim {claim}; prepaid label emailed to {email}."),
        ],
        "followup": ["Thanks, I'll send it back this week.", "Great, I'll print the label tonight."],
        "issue": ["{product} (order {order}) no longer powers on; it blinks red and shows error {code}."],
        "next": ["Ship the replacement under claim {claim} once the return is scanned; remind {first} on {followup_date} if it has not been sent."],
    }, "ko": {
        "complaint": [
            "{product}{ga} 더 이상 켜지지 않습니다. {date}에 구매했고 주문번호는 {order}입니다. 빨간 불이 잠깐 켜졌다가 {code} 오류가 깜빡여요.",
            "주문 {order}로 산 {product}{ga} 오늘 갑자기 먹통이 됐어요. 빨간 불만 잠깐 깜빡이고({code}) 전원이 안 들어옵니다. 산 지 몇 달밖에 안 됐어요.",
        ],
        "ask": ["다른 콘센트에 연결한 뒤 전원 버튼을 15초간 눌러 보시고 어떻게 되는지 알려주시겠어요?"],
        "info": ["둘 다 해 봤는데 똑같이 빨간 불이 깜빡이고 {code} 오류가 나요.", "콘센트 바꾸고 15초 눌러 봤는데 여전히 {code} 오류입니다."],
        "steps": [
            ("확인 감사합니다. {code} 오류는 전원 보드 고장을 뜻하며, 12개월 무상 보증 대상입니다.",
             "다른 콘센트와 15초 초기화를 시도했으나 {code} 오류가 계속됨. 전원 보드 고장으로 보이며 보증 대상."),
            ("보증 접수 {claim} 건을 생성했고, {email}로 선불 반송 라벨을 보내드렸습니다. 택배사가 상품을 스캔하면 바로 교환품을 발송합니다.",
             "보증 접수 {claim} 생성, {email}로 선불 반송 라벨 발송."),
        ],
        "followup": ["감사합니다. 이번 주에 보낼게요.", "오늘 밤에 라벨 출력할게요."],
        "issue": ["{product}(주문번호 {order}){ga} 전원이 켜지지 않음. 빨간 불이 깜빡이며 {code} 오류 표시."],
        "next": ["반송품 스캔 확인 후 보증 접수 {claim} 건으로 교환품 발송. {followup_date}까지 미발송 시 고객에게 안내."],
    }},
    {"name": "billed_after_cancel", "code": "SUB-1##", "en": {
        "complaint": [
            "I cancelled my {plan} on {date} but I was billed {amount} again this month. Please refund it.",
            "Why was I charged {amount} for the {plan}? I cancelled on {date} and got a confirmation email.",
        ],
        "ask": ["Do you still have the cancellation confirmation email? The reference number at the bottom would help."],
        "info": ["Yes, the reference is {claim}."],
        "steps": [
            ("Found it. The cancellation {claim} was recorded, but a sync error ({code}) left the subscription active in billing.",
             "Cancellation {claim} was recorded, but sync error {code} left the subscription active in billing."),
            ("I have cancelled the subscription in billing and refunded the {amount} charge to your original payment method.",
             "Cancelled the subscription in billing and refunded the {amount} charge to the original payment method."),
        ],
        "followup": ["Thank you, that's all I needed.", "OK, thanks for fixing it."],
        "issue": ["The {plan} was cancelled on {date} (reference {claim}) but the customer was billed {amount} again because of sync error {code}."],
        "next": ["Confirm there is no further charge on the next billing date; report sync error {code} to the billing team."],
    }, "ko": {
        "complaint": [
            "{date}에 {plan}{peul} 해지했는데 이번 달에 또 {amount}이 결제됐습니다. 환불해 주세요.",
            "{plan} 요금 {amount}이 왜 청구됐나요? {date}에 해지했고 확인 메일도 받았습니다.",
        ],
        "ask": ["해지 확인 메일이 남아 있으신가요? 메일 하단의 접수번호를 알려주시면 빠르게 확인할 수 있습니다."],
        "info": ["네, 접수번호는 {claim}입니다."],
        "steps": [
            ("확인했습니다. 해지 접수 {claim} 건은 정상 등록되었지만, 동기화 오류({code})로 결제 시스템에는 구독이 활성 상태로 남아 있었습니다.",
             "해지 접수 {claim} 건은 등록되었으나 동기화 오류 {code}로 결제 시스템에 구독이 활성 상태로 남아 있었음."),
            ("결제 시스템에서도 구독을 해지했고, 청구된 {amount}은 원래 결제 수단으로 환불했습니다.",
             "결제 시스템에서 구독을 해지하고 {amount}을 원래 결제 수단으로 환불함."),
        ],
        "followup": ["감사합니다. 그거면 됐어요.", "처리해 주셔서 고맙습니다."],
        "issue": ["{date}에 {plan}{peul} 해지했으나(접수번호 {claim}) 동기화 오류 {code}로 {amount}이 다시 청구됨."],
        "next": ["다음 결제일에 추가 청구가 없는지 확인하고, 동기화 오류 {code} 건을 결제팀에 공유."],
    }},
]

TEXT = {
    "en": {
        "system": [
            "You are a support operations assistant at {shop}. You write concise, factual ticket summaries for agents.",
            "You help the {shop} support team hand tickets over between shifts. Be brief and keep ids, amounts and error codes exact.",
        ],
        "instruction": [
            "Summarise this ticket for the next shift. Use three parts: Issue, Steps taken, Next action.",
            "Please write a handover summary of the ticket below with the headings Issue / Steps taken / Next action. Keep ids and error codes exact.",
            "Summarize the ticket. Format:\nIssue: ...\nSteps taken: (bullets)\nNext action: ...",
        ],
        "header": "Ticket {ticket} · {shop} · channel: {channel} · priority: {priority}",
        "customer": "[Customer · {name}]", "agent": "[Agent · {agent}]",
        "greet": ["Thanks for reaching out, {first}. ", "Sorry about the trouble, {first}. ", "Hi {first}, thanks for the details. "],
        "closing": ["Is there anything else I can help with?", "I'll keep this ticket open until it's resolved."],
        "channels": ["email", "chat", "phone (transcribed)"], "priorities": ["low", "normal", "high", "urgent"],
        "labels": ("Issue:", "Steps taken:", "Next action:"), "title": "Ticket {ticket} ({name})",
    },
    "ko": {
        "system": [
            "당신은 {shop} 고객지원팀의 업무 보조 AI입니다. 상담원이 빠르게 읽을 수 있도록 간결하고 사실에 근거한 티켓 요약을 작성합니다.",
            "당신은 {shop} 상담팀의 근무 교대 인계를 돕습니다. 짧게 쓰되 주문번호, 금액, 오류 코드는 정확히 그대로 적으세요.",
        ],
        "instruction": [
            "다음 근무자에게 인계할 수 있도록 아래 티켓을 요약해 주세요. 문제 / 조치 내역 / 다음 조치 세 부분으로 작성하세요.",
            "아래 상담 내역을 요약해 주세요. 형식: 문제, 조치 내역(글머리표), 다음 조치. 주문번호와 오류 코드는 그대로 적어 주세요.",
            "이 티켓을 인계용으로 정리해 주세요.\n문제: ...\n조치 내역: (글머리표)\n다음 조치: ...",
        ],
        "header": "티켓 {ticket} · {shop} · 채널: {channel} · 우선순위: {priority}",
        "customer": "[고객 · {name}]", "agent": "[상담원 · {agent}]",
        "greet": ["문의 주셔서 감사합니다, {name}님. ", "불편을 드려 죄송합니다, {name}님. ", "안녕하세요 {name}님, 자세히 알려주셔서 감사합니다. "],
        "closing": ["더 도와드릴 일이 있으면 말씀해 주세요.", "해결될 때까지 이 티켓은 열어 두겠습니다."],
        "channels": ["이메일", "채팅", "전화(녹취 요약)"], "priorities": ["낮음", "보통", "높음", "긴급"],
        "labels": ("문제:", "조치 내역:", "다음 조치:"), "title": "티켓 {ticket} ({name})",
    },
}


def _code(rng: random.Random, pattern: str) -> str:
    return "".join(str(rng.randint(0, 9)) if ch == "#" else ch for ch in pattern)


def _slots(rng: random.Random, lang: Lang, code_pattern: str) -> dict[str, Any]:
    name, email = person(rng, lang)
    product_t = rng.choice(PRODUCTS)
    product = pick_lang(product_t, lang)
    plan = pick_lang(rng.choice(PLANS), lang)
    want, got = rng.sample(COLORS, 2)
    date = iso_date(rng)
    follow = rng.randrange(len(WEEKDAYS[0]))
    major = rng.randint(2, 4)
    s: dict[str, Any] = {
        "name": name, "first": name.split(" ")[0], "email": email, "agent": agent_name(rng, lang),
        "product": product, "plan": plan, "order": order_id(rng), "code": _code(rng, code_pattern),
        "amount": money(rng, lang), "last4": f"{rng.randint(0, 9999):04d}", "d2": f"{rng.randint(0, 99):02d}",
        "tracking": f"{rng.randint(10**11, 10**12 - 1)}", "carrier": pick_lang(rng.choice(CARRIERS), lang),
        "fw": f"v{major}.{rng.randint(1, 9)}.{rng.randint(0, 9)}", "fw_old": f"v{major}.0.{rng.randint(0, 9)}",
        "claim": f"WR-{hex_id(rng, 6).upper()}", "sku": f"{product_t[2]}-{rng.randint(1000, 9999)}-{pick_lang(got, 'en')[:2].upper()}",
        "want": pick_lang(want, lang), "got": pick_lang(got, lang), "ticket": ticket_id(rng),
        "shop": pick_lang(rng.choice(SHOPS), lang),
        "date": ko_date(date) if lang == "ko" else date,
        "followup_date": WEEKDAYS[1 if lang == "ko" else 0][follow],
    }
    s["ga"], s["eul"] = josa(product, "이", "가"), josa(product, "을", "를")
    s["peul"] = josa(plan, "을", "를")
    return s


def build(rng: random.Random, lang: Lang) -> Example:
    sc = rng.choice(SCENARIOS)
    t, txt = sc[lang], TEXT[lang]
    s = _slots(rng, lang, sc["code"])
    s["channel"], s["priority"] = rng.choice(txt["channels"]), rng.choice(txt["priorities"])
    cust, agent = fill(txt["customer"], s), fill(txt["agent"], s)

    turns = [(cust, fill(rng.choice(t["complaint"]), s))]
    turns.append((agent, fill(rng.choice(txt["greet"]) + rng.choice(t["ask"]), s)))
    turns.append((cust, fill(rng.choice(t["info"]), s)))
    steps = t["steps"]
    if rng.random() < 0.5:  # both actions in one agent message
        turns.append((agent, " ".join(fill(a, s) for a, _ in steps)))
    else:
        turns.append((agent, fill(steps[0][0], s)))
        turns.append((agent, fill(steps[1][0], s)))
    if rng.random() < 0.75:
        turns.append((cust, fill(rng.choice(t["followup"]), s)))
    if rng.random() < 0.4:
        turns.append((agent, rng.choice(txt["closing"])))

    thread = fill(txt["header"], s) + "\n\n" + "\n".join(f"{who} {said}" for who, said in turns)
    instruction = rng.choice(txt["instruction"])
    user = f"{instruction}\n\n{thread}" if rng.random() < 0.6 else f"{thread}\n\n{instruction}"

    li, ls, ln = txt["labels"]
    lines = [fill(txt["title"], s)] if rng.random() < 0.4 else []
    lines.append(f"{li} {fill(rng.choice(t['issue']), s)}")
    lines.append(ls)
    lines += [f"- {fill(summary, s)}" for _, summary in steps]
    lines.append(f"{ln} {fill(rng.choice(t['next']), s)}")
    messages = [{"role": "system", "content": fill(rng.choice(txt["system"]), s)},
                {"role": "user", "content": user}]
    return Example(messages=messages, answer="\n".join(lines), info={"scenario": sc["name"]})
