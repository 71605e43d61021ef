from app.errors import Unprocessable


class WebhookUrlRejected(Unprocessable):
    error_name = "webhook_url_rejected"
